"""Names that outlive accounts: a staff member who leaves can be deactivated and deleted.

* ``AuditEvent`` keeps who acted with the event (``actor_ref``: their user id;
  ``actor_name``: their email), and ``actor`` becomes SET_NULL instead of PROTECT.
* ``Approval.decided_by_name`` and ``StaffNote.author_name`` keep the approver and the
  note's author the same way; ``StaffNote.author`` becomes nullable, SET_NULL.
* Existing rows are filled from the accounts they link to, before any of those
  accounts can be deleted. The guards of 0002/0003 do not look at the new columns, so
  these UPDATEs pass them; 0006 then freezes the new columns like the rest.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, NullIf


def fill_names(apps, schema_editor):
    User = apps.get_model(settings.AUTH_USER_MODEL)

    def name_of(column):
        return Subquery(
            User.objects.filter(pk=OuterRef(column))
            .annotate(n=Coalesce(NullIf("email", Value("")), "username"))
            .values("n")[:1]
        )

    AuditEvent = apps.get_model("approvals", "AuditEvent")
    AuditEvent.objects.filter(actor__isnull=False).update(
        actor_ref=F("actor_id"), actor_name=name_of("actor_id")
    )
    Approval = apps.get_model("approvals", "Approval")
    Approval.objects.filter(decided_by__isnull=False).update(decided_by_name=name_of("decided_by_id"))
    StaffNote = apps.get_model("approvals", "StaffNote")
    StaffNote.objects.update(author_name=name_of("author_id"))


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0006_notification_outbox'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='approval',
            name='decided_by_name',
            field=models.CharField(blank=True, db_default='', default='', max_length=254),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='actor_name',
            field=models.CharField(blank=True, db_default='', default='', max_length=254),
        ),
        migrations.AddField(
            model_name='auditevent',
            name='actor_ref',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='staffnote',
            name='author_name',
            field=models.CharField(blank=True, db_default='', default='', max_length=254),
        ),
        migrations.RunPython(fill_names, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='auditevent',
            name='actor',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='staffnote',
            name='author',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
        ),
    ]
