"""LedgerEntry.identity: which effect an entry records (tool + identity fields), for the lineage.

Existing rows are backfilled with the same hash ``agent.tools.registry.identity_hash``
computes (the identity fields are written out here so this migration never changes
when the registry does), and their keys move from ``root:call_id`` to
``root:call_id:args_hash[:16]`` (``agent.record.execute.ledger_key``), so a step
re-executed after the upgrade still finds its own claim. The old key was unique,
so the new one is too.
"""

import hashlib
import json

from django.db import migrations, models

IDENTITY_FIELDS = {
    "issue_refund": ("order_reference", "amount_cents"),
    "send_customer_email": ("reference",),
    "cancel_order": ("order_reference",),
}


def _identity(tool, args):
    fields = args if isinstance(args, dict) else {}
    picked = {name: fields.get(name) for name in IDENTITY_FIELDS.get(tool, ())}
    canonical = json.dumps(
        {"tool": tool, "identity": picked}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def backfill(apps, schema_editor):
    LedgerEntry = apps.get_model("agent", "LedgerEntry")
    rows = LedgerEntry.objects.filter(identity="").only(
        "pk", "key", "root_run_id", "tool_call_id", "args_hash", "tool", "arguments"
    )
    for entry in rows.iterator():
        key = entry.key
        if key == f"{entry.root_run_id}:{entry.tool_call_id}":
            key = f"{key}:{entry.args_hash[:16]}"
        LedgerEntry.objects.filter(pk=entry.pk).update(
            identity=_identity(entry.tool, entry.arguments), key=key
        )


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0005_step_args_hash"),
    ]

    operations = [
        migrations.AddField(
            model_name="ledgerentry",
            name="identity",
            field=models.CharField(
                blank=True,
                help_text="sha256 of the tool and its identity fields (agent.tools.registry.identity_hash).",
                max_length=64,
            ),
        ),
        migrations.AddIndex(
            model_name="ledgerentry",
            index=models.Index(fields=["root_run", "identity"], name="ledger_lineage_identity"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
