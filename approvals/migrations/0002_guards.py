"""Database guards for consent and audit: what a person was asked never changes,
a decision is made once, and the audit trail is append-only.

These hold even against code that bypasses ``Model.save`` (``QuerySet.update``,
raw SQL from a bug): the database refuses the write. Deleting rows stays
possible (``seed --reset`` clears the demo world).
"""

from django.conf import settings
from django.db import migrations, models

APPROVAL_GUARD = """
CREATE OR REPLACE FUNCTION approvals_approval_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.run_id <> OLD.run_id OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.tool_call_id <> OLD.tool_call_id OR NEW.tool <> OLD.tool
       OR NEW.arguments IS DISTINCT FROM OLD.arguments OR NEW.args_hash <> OLD.args_hash
       OR NEW.preview <> OLD.preview THEN
        RAISE EXCEPTION 'approval %: what a person is asked to approve never changes', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
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
CREATE TRIGGER approvals_approval_guard BEFORE UPDATE ON approvals_approval
    FOR EACH ROW EXECUTE FUNCTION approvals_approval_guard();
"""

AUDIT_GUARD = """
CREATE OR REPLACE FUNCTION approvals_auditevent_guard() RETURNS trigger AS $$
BEGIN
    -- The only update allowed: a deleted run's link set to NULL (on_delete=SET_NULL).
    IF NEW.merchant_id <> OLD.merchant_id OR NEW.action <> OLD.action OR NEW.channel <> OLD.channel
       OR NEW.detail IS DISTINCT FROM OLD.detail OR NEW.created_at <> OLD.created_at
       OR NEW.actor_id IS DISTINCT FROM OLD.actor_id
       OR (NEW.run_id IS DISTINCT FROM OLD.run_id AND NEW.run_id IS NOT NULL) THEN
        RAISE EXCEPTION 'audit event %: the audit trail is append-only', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER approvals_auditevent_guard BEFORE UPDATE ON approvals_auditevent
    FOR EACH ROW EXECUTE FUNCTION approvals_auditevent_guard();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="actor",
            field=models.ForeignKey(
                null=True, on_delete=models.deletion.PROTECT, to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.RunSQL(
            APPROVAL_GUARD,
            "DROP TRIGGER IF EXISTS approvals_approval_guard ON approvals_approval;"
            " DROP FUNCTION IF EXISTS approvals_approval_guard();",
        ),
        migrations.RunSQL(
            AUDIT_GUARD,
            "DROP TRIGGER IF EXISTS approvals_auditevent_guard ON approvals_auditevent;"
            " DROP FUNCTION IF EXISTS approvals_auditevent_guard();",
        ),
    ]
