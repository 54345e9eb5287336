"""The consent and audit guards learn the two changes privacy needs, and nothing more.

1. **A redaction** (``agent.redaction``: ``erase_customer`` and the retention sweep)
   marks its own transaction with ``SET LOCAL deskhand.redaction = 'on'``. Under that
   mark an approval may have the *words* of its request and decision replaced by a
   marker (``[erased]`` or ``[redacted]``, the constants of ``agent.redaction``):

   * in ``arguments``, ``approved_arguments`` and ``prior_effects`` (JSON) a string may become a marker, and
     nothing else may change — the same keys, the same array lengths, every number,
     boolean and null as it was (the amount, the order, the argument hash's inputs
     that are facts);
   * ``preview`` and ``reason`` may be rewritten only to a text carrying a marker;
   * every other column stays exactly as it was (status, decision, approver, times,
     ``args_hash``): compared as the whole row minus those four columns.

   An audit event's ``detail`` may be redacted by the same rule, and nothing else
   of it may change. Without the mark, both guards are as strict as before.
   The rest is 0005's guard (approve with changes, policy decisions) as it was.
2. **A staff member who leaves.** The audit event keeps ``actor_ref`` and
   ``actor_name`` (0007); deleting the account sets ``actor`` to NULL, which the
   audit guard now allows (as it allowed a deleted run's link), while ``actor_ref``
   and ``actor_name`` never change. An approval's ``decided_by_name`` is frozen
   once the approval is decided, like the rest of the decision.

The triggers themselves (0002) stay; only their functions are replaced, and the
0005 (approval) and 0002 (audit) versions are restored on reverse.
"""

from django.db import migrations

REDACTS = """
CREATE OR REPLACE FUNCTION deskhand_redacts(old jsonb, new jsonb) RETURNS boolean AS $$
-- Whether NEW is OLD with some strings replaced by a redaction marker, and nothing else changed.
DECLARE
    kind text := jsonb_typeof(old);
BEGIN
    IF old IS NULL OR new IS NULL THEN
        RETURN old IS NOT DISTINCT FROM new;
    END IF;
    IF kind = 'string' THEN
        RETURN new = old OR new IN ('"[erased]"'::jsonb, '"[redacted]"'::jsonb);
    END IF;
    IF kind <> jsonb_typeof(new) THEN
        RETURN false;
    END IF;
    IF kind = 'object' THEN
        IF ARRAY(SELECT jsonb_object_keys(old) ORDER BY 1)
           <> ARRAY(SELECT jsonb_object_keys(new) ORDER BY 1) THEN
            RETURN false;
        END IF;
        RETURN NOT EXISTS (
            SELECT 1 FROM jsonb_each(old) AS o WHERE NOT deskhand_redacts(o.value, new -> o.key)
        );
    END IF;
    IF kind = 'array' THEN
        IF jsonb_array_length(old) <> jsonb_array_length(new) THEN
            RETURN false;
        END IF;
        RETURN NOT EXISTS (
            SELECT 1 FROM generate_series(0, jsonb_array_length(old) - 1) AS i
            WHERE NOT deskhand_redacts(old -> i, new -> i)
        );
    END IF;
    RETURN new = old;  -- numbers, booleans, null: the facts
END
$$ LANGUAGE plpgsql IMMUTABLE;

CREATE OR REPLACE FUNCTION deskhand_redacts_text(old text, new text) RETURNS boolean AS $$
    SELECT new = old OR strpos(new, '[erased]') > 0 OR strpos(new, '[redacted]') > 0
$$ LANGUAGE sql IMMUTABLE;
"""

DROP_REDACTS = """
DROP FUNCTION IF EXISTS deskhand_redacts(jsonb, jsonb);
DROP FUNCTION IF EXISTS deskhand_redacts_text(text, text);
"""

APPROVAL_GUARD = """
CREATE OR REPLACE FUNCTION approvals_approval_guard() RETURNS trigger AS $$
DECLARE
    deciding boolean := OLD.status = 'pending' AND NEW.status = 'approved';
    words text[] := ARRAY['arguments', 'approved_arguments', 'preview', 'reason', 'prior_effects'];
BEGIN
    IF current_setting('deskhand.redaction', true) = 'on' THEN
        IF (to_jsonb(NEW) - words) IS DISTINCT FROM (to_jsonb(OLD) - words)
           OR NOT deskhand_redacts(OLD.arguments, NEW.arguments)
           OR NOT deskhand_redacts(OLD.approved_arguments, NEW.approved_arguments)
           OR NOT deskhand_redacts(OLD.prior_effects, NEW.prior_effects)
           OR NOT deskhand_redacts_text(OLD.preview, NEW.preview)
           OR NOT deskhand_redacts_text(OLD.reason, NEW.reason) THEN
            RAISE EXCEPTION 'approval %: a redaction replaces words with a marker and changes nothing else', OLD.id
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.run_id <> OLD.run_id OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.tool_call_id <> OLD.tool_call_id OR NEW.tool <> OLD.tool
       OR NEW.arguments IS DISTINCT FROM OLD.arguments OR NEW.args_hash <> OLD.args_hash
       OR NEW.preview <> OLD.preview THEN
        RAISE EXCEPTION 'approval %: what a person is asked to approve never changes', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.status = 'pending'
       AND NEW.status NOT IN ('pending', 'approved', 'denied', 'expired', 'withdrawn') THEN
        RAISE EXCEPTION 'approval %: pending may become approved, denied, expired or withdrawn, not %',
            OLD.id, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.approved_arguments IS DISTINCT FROM OLD.approved_arguments
        OR NEW.approved_hash <> OLD.approved_hash) AND NOT deciding THEN
        RAISE EXCEPTION 'approval %: what was approved is recorded once, with the approval', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF deciding AND (NEW.approved_arguments IS NULL) <> (NEW.approved_hash = '') THEN
        RAISE EXCEPTION 'approval %: approved arguments and their hash are recorded together', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.policy_id IS DISTINCT FROM OLD.policy_id OR NEW.policy_rule IS DISTINCT FROM OLD.policy_rule)
       AND NOT (deciding AND NEW.channel = 'policy') THEN
        RAISE EXCEPTION 'approval %: only a policy decision names a policy, once', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.channel = 'policy' AND OLD.channel <> 'policy' AND (NEW.policy_id IS NULL OR NEW.policy_rule IS NULL) THEN
        RAISE EXCEPTION 'approval %: a policy decision names its policy version and rule', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.status <> 'pending' AND (
           NEW.status <> OLD.status OR NEW.decided_at IS DISTINCT FROM OLD.decided_at
           OR NEW.reason <> OLD.reason OR NEW.channel <> OLD.channel
           OR NEW.decided_by_name <> OLD.decided_by_name
           OR (NEW.decided_by_id IS DISTINCT FROM OLD.decided_by_id AND NEW.decided_by_id IS NOT NULL)) THEN
        RAISE EXCEPTION 'approval % is already %; a decision is made once', OLD.id, OLD.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""

# As migration 0005 (approve with changes and policy) left it.
APPROVAL_GUARD_BEFORE = """
CREATE OR REPLACE FUNCTION approvals_approval_guard() RETURNS trigger AS $$
DECLARE
    deciding boolean := OLD.status = 'pending' AND NEW.status = 'approved';
BEGIN
    IF NEW.run_id <> OLD.run_id OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.tool_call_id <> OLD.tool_call_id OR NEW.tool <> OLD.tool
       OR NEW.arguments IS DISTINCT FROM OLD.arguments OR NEW.args_hash <> OLD.args_hash
       OR NEW.preview <> OLD.preview THEN
        RAISE EXCEPTION 'approval %: what a person is asked to approve never changes', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.status = 'pending'
       AND NEW.status NOT IN ('pending', 'approved', 'denied', 'expired', 'withdrawn') THEN
        RAISE EXCEPTION 'approval %: pending may become approved, denied, expired or withdrawn, not %',
            OLD.id, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.approved_arguments IS DISTINCT FROM OLD.approved_arguments
        OR NEW.approved_hash <> OLD.approved_hash) AND NOT deciding THEN
        RAISE EXCEPTION 'approval %: what was approved is recorded once, with the approval', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF deciding AND (NEW.approved_arguments IS NULL) <> (NEW.approved_hash = '') THEN
        RAISE EXCEPTION 'approval %: approved arguments and their hash are recorded together', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF (NEW.policy_id IS DISTINCT FROM OLD.policy_id OR NEW.policy_rule IS DISTINCT FROM OLD.policy_rule)
       AND NOT (deciding AND NEW.channel = 'policy') THEN
        RAISE EXCEPTION 'approval %: only a policy decision names a policy, once', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.channel = 'policy' AND OLD.channel <> 'policy' AND (NEW.policy_id IS NULL OR NEW.policy_rule IS NULL) THEN
        RAISE EXCEPTION 'approval %: a policy decision names its policy version and rule', OLD.id
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
"""

AUDIT_GUARD = """
CREATE OR REPLACE FUNCTION approvals_auditevent_guard() RETURNS trigger AS $$
BEGIN
    IF current_setting('deskhand.redaction', true) = 'on' THEN
        IF (to_jsonb(NEW) - 'detail') IS DISTINCT FROM (to_jsonb(OLD) - 'detail')
           OR NOT deskhand_redacts(OLD.detail, NEW.detail) THEN
            RAISE EXCEPTION 'audit event %: a redaction replaces words with a marker and changes nothing else', OLD.id
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    -- Not rewrites: a deleted run's link, or a deleted account's link, set to NULL
    -- (on_delete=SET_NULL); who acted stays in actor_ref and actor_name.
    IF NEW.merchant_id <> OLD.merchant_id OR NEW.action <> OLD.action OR NEW.channel <> OLD.channel
       OR NEW.detail IS DISTINCT FROM OLD.detail OR NEW.created_at <> OLD.created_at
       OR NEW.actor_ref IS DISTINCT FROM OLD.actor_ref OR NEW.actor_name <> OLD.actor_name
       OR (NEW.actor_id IS DISTINCT FROM OLD.actor_id AND NEW.actor_id IS NOT NULL)
       OR (NEW.run_id IS DISTINCT FROM OLD.run_id AND NEW.run_id IS NOT NULL) THEN
        RAISE EXCEPTION 'audit event %: the audit trail is append-only', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""

# As migration 0002 left it.
AUDIT_GUARD_BEFORE = """
CREATE OR REPLACE FUNCTION approvals_auditevent_guard() RETURNS trigger AS $$
BEGIN
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
"""


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_names_outlive_accounts")]

    operations = [
        migrations.RunSQL(REDACTS, DROP_REDACTS),
        migrations.RunSQL(APPROVAL_GUARD, APPROVAL_GUARD_BEFORE),
        migrations.RunSQL(AUDIT_GUARD, AUDIT_GUARD_BEFORE),
    ]
