"""Create DBOS's system schema in the Django database as part of `migrate`.

Web and CLI processes talk to DBOS through a DBOSClient, which never runs
DBOS migrations itself; creating the schema here means they work before any
worker has started.
"""

from django.db import migrations


def create_dbos_schema(apps, schema_editor):
    from deskhand.infra.dbos.client import migrate_system_schema

    migrate_system_schema(schema_editor.connection.alias)


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("agent", "0002_initial")]
    operations = [migrations.RunPython(create_dbos_schema, migrations.RunPython.noop)]
