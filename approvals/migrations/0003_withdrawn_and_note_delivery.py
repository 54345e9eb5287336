"""Withdrawn approvals and note delivery.

* ``Approval.status`` gains ``withdrawn``: a pending approval whose run was
  cancelled. The guard trigger now names the transitions it allows: pending may
  become approved, denied, expired or — new — withdrawn, and nothing else (a
  status outside that list is refused even from pending); once it is not
  pending, nothing about the decision changes, as before.
* ``StaffNote.delivered_at``: set when DBOS accepted the note's send, so the
  reconciler re-sends only the notes that never arrived.
"""

from django.db import migrations, models

GUARD_HEAD = """
CREATE OR REPLACE FUNCTION approvals_approval_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.run_id <> OLD.run_id OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.tool_call_id <> OLD.tool_call_id OR NEW.tool <> OLD.tool
       OR NEW.arguments IS DISTINCT FROM OLD.arguments OR NEW.args_hash <> OLD.args_hash
       OR NEW.preview <> OLD.preview THEN
        RAISE EXCEPTION 'approval %: what a person is asked to approve never changes', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
"""

GUARD_TAIL = """
    IF OLD.status <> 'pending' AND (
           NEW.status <> OLD.status OR NEW.decided_at IS DISTINCT FROM OLD.decided_at
           OR NEW.reason <> OLD.reason OR NEW.channel <> OLD.channel
           OR (NEW.decided_by_id IS DISTINCT FROM OLD.decided_by_id AND NEW.decided_by_id IS NOT NULL)) THEN
        RAISE EXCEPTION 'approval % is already %; a decision is made once', OLD.id, OLD.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""

TRANSITIONS = """
    IF OLD.status = 'pending'
       AND NEW.status NOT IN ('pending', 'approved', 'denied', 'expired', 'withdrawn') THEN
        RAISE EXCEPTION 'approval %: pending may become approved, denied, expired or withdrawn, not %',
            OLD.id, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
"""


class Migration(migrations.Migration):
    dependencies = [("approvals", "0002_guards")]

    operations = [
        migrations.AddField(
            model_name="staffnote",
            name="delivered_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="approval",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("approved", "Approved"),
                    ("denied", "Denied"),
                    ("expired", "Expired"),
                    ("withdrawn", "Withdrawn"),
                ],
                default="pending",
                max_length=10,
            ),
        ),
        # The trigger itself (0002) stays; only its function is replaced, and restored on reverse.
        migrations.RunSQL(GUARD_HEAD + TRANSITIONS + GUARD_TAIL, GUARD_HEAD + GUARD_TAIL),
    ]
