"""``cancelling``: a run whose cancel is recorded but whose workflow DBOS has not yet confirmed
stopped. It still holds its ticket, so the one-open-run-per-ticket index counts it."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agent', '0003_dbos_schema'),
        ('desk', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='run',
            name='one_open_run_per_ticket',
        ),
        migrations.AlterField(
            model_name='run',
            name='status',
            field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('awaiting_approval', 'Awaiting Approval'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('exhausted', 'Exhausted'), ('cancelled', 'Cancelled'), ('cancelling', 'Cancelling')], default='queued', max_length=20),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['queued', 'running', 'awaiting_approval', 'cancelling'])), fields=('ticket',), name='one_open_run_per_ticket'),
        ),
    ]
