# Reconciliation's findings: disagreements between the ledger and a payment provider.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agent", "0009_ledger_intents"),
        ("desk", "0002_effect_adapters"),
    ]

    operations = [
        migrations.CreateModel(
            name="EffectFinding",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("provider_only", "refund at the provider with no ledger entry"),
                            ("ledger_only", "ledger entry the provider does not know"),
                            ("amount_differs", "amounts differ"),
                            ("unresolved", "claim whose outcome could not be confirmed"),
                        ],
                        max_length=16,
                    ),
                ),
                ("fingerprint", models.CharField(max_length=300, unique=True)),
                ("provider_ref", models.CharField(blank=True, max_length=250)),
                ("ledger_amount_cents", models.BigIntegerField(blank=True, null=True)),
                ("provider_amount_cents", models.BigIntegerField(blank=True, null=True)),
                ("detail", models.TextField()),
                ("found_at", models.DateTimeField()),
                ("last_seen_at", models.DateTimeField()),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                ("resolved_by", models.CharField(blank=True, max_length=254)),
                ("resolution", models.TextField(blank=True)),
                (
                    "ledger_entry",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="findings",
                        to="agent.ledgerentry",
                    ),
                ),
                (
                    "merchant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="effect_findings",
                        to="desk.merchant",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["merchant", "-found_at"], name="finding_merchant_recent")],
            },
        ),
    ]
