"""A policy version keeps its author's name when their account is deleted.

A merchant rule decides in place of a person only because a person wrote it, so the
consent check asks who wrote it (``ApprovalPolicy.author``). Before this, the author
link was PROTECT, so an owner who ever saved a policy could not be deleted; now the
link becomes NULL on deletion and ``created_by_name`` (backfilled here) keeps the name.

The policy guard (0005) refused every UPDATE. It now allows exactly one: the author
link set to NULL, with every other column — the name included — unchanged.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

BACKFILL = """
UPDATE approvals_approvalpolicy AS p
   SET created_by_name = COALESCE(NULLIF(u.email, ''), u.username)
  FROM auth_user AS u
 WHERE u.id = p.created_by_id AND p.created_by_name = '';
"""

POLICY_GUARD = """
CREATE OR REPLACE FUNCTION approvals_approvalpolicy_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.created_by_id IS NULL AND OLD.created_by_id IS NOT NULL
       AND (to_jsonb(NEW) - 'created_by_id') = (to_jsonb(OLD) - 'created_by_id') THEN
        RETURN NEW;  -- the author's account was deleted; their name stays
    END IF;
    RAISE EXCEPTION 'approval policy %: a version is never edited; a change is a new version', OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;
"""

POLICY_GUARD_BEFORE = """
CREATE OR REPLACE FUNCTION approvals_approvalpolicy_guard() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'approval policy %: a version is never edited; a change is a new version', OLD.id
        USING ERRCODE = 'check_violation';
END
$$ LANGUAGE plpgsql;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0008_privacy_guards"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="approvalpolicy",
            name="created_by_name",
            field=models.CharField(blank=True, db_default="", default="", max_length=254),
        ),
        # The guard refuses every UPDATE until it is replaced; replace it first, then backfill.
        migrations.RunSQL(POLICY_GUARD, POLICY_GUARD_BEFORE),
        migrations.RunSQL(
            "ALTER TABLE approvals_approvalpolicy DISABLE TRIGGER approvals_approvalpolicy_guard;"
            + BACKFILL
            + "ALTER TABLE approvals_approvalpolicy ENABLE TRIGGER approvals_approvalpolicy_guard;",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="approvalpolicy",
            name="created_by",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
