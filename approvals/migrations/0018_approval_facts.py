"""An approval records the facts the person was shown (the order's total and refunded total),
and the guard keeps them as fixed as the call itself.

The guard function is 0008's with one more column among what a person is asked to approve:
``facts`` never changes once written (a redaction leaves it alone too: it holds amounts and
an order's reference, no one's words). Reversing restores 0008's function.
"""

import importlib

from django.db import migrations, models

_0008 = importlib.import_module("approvals.migrations.0008_privacy_guards")

ASKED = "OR NEW.preview <> OLD.preview THEN\n        RAISE EXCEPTION 'approval %: what a person is asked"
APPROVAL_GUARD = _0008.APPROVAL_GUARD.replace(
    ASKED, "OR NEW.preview <> OLD.preview OR NEW.facts IS DISTINCT FROM OLD.facts THEN\n"
    "        RAISE EXCEPTION 'approval %: what a person is asked",
)
assert APPROVAL_GUARD != _0008.APPROVAL_GUARD


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0017_refund_created"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="facts",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunSQL(
            "ALTER TABLE approvals_approval ALTER COLUMN facts SET DEFAULT '{}'::jsonb",
            "ALTER TABLE approvals_approval ALTER COLUMN facts DROP DEFAULT",
        ),
        migrations.RunSQL(APPROVAL_GUARD, _0008.APPROVAL_GUARD),
    ]
