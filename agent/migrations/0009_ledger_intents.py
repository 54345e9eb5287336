# A ledger entry can be a pending intent: claimed and committed before another system is
# called under its key, then recorded done or failed (agent.effects).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent", "0008_cache_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="ledgerentry",
            name="state",
            field=models.CharField(
                choices=[("pending", "Pending"), ("done", "Done"), ("failed", "Failed")],
                db_default="done",
                default="done",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="adapter",
            field=models.CharField(db_default="database", default="database", max_length=12),
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="provider_ref",
            field=models.CharField(blank=True, db_default="", default="", max_length=250),
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="provider_calls",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="recorded_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="ledgerentry",
            index=models.Index(
                condition=models.Q(("state", "pending")), fields=["created_at"], name="ledger_pending"
            ),
        ),
    ]
