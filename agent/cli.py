"""Shared plumbing for the management commands: who is acting, waiting, printing."""

from __future__ import annotations

import json
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from agent.models import TERMINAL_STATUSES, Run, RunStatus
from agent.runs import run_outcome


def user_by_email(email: str) -> Any:
    User = get_user_model()
    user = User.objects.filter(email__iexact=email.strip()).first()
    if user is None:
        raise CommandError(f"no user with email {email!r}.")
    return user


def run_by_id(run_id: str) -> Run:
    import uuid

    try:
        uuid.UUID(run_id)
    except ValueError:
        raise CommandError(f"{run_id!r} is not a run id (expected a UUID).") from None
    run = Run.objects.select_related("ticket", "merchant").filter(pk=run_id).first()
    if run is None:
        raise CommandError(f"no run {run_id}.")
    return run


def wait_for_rest(run: Run, timeout: float) -> Run:
    """Until the run is terminal or waiting for a person (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if run.status in TERMINAL_STATUSES:
            return run
        if (
            run.status == RunStatus.AWAITING_APPROVAL
            and run.approvals.filter(status="pending").exists()
        ):
            return run
        if time.monotonic() > deadline:
            raise CommandError(
                f"run {run.id} is still {run.status} after {timeout:.0f}s; is a worker running (python manage.py worker)?"
            )
        time.sleep(0.2)


def print_outcome(cmd: Any, run: Run, as_json: bool) -> None:
    out = run_outcome(run)
    if as_json:
        cmd.stdout.write(json.dumps(out, sort_keys=True))
        return
    cmd.stdout.write(
        f"run {out['run_id']}  ticket {out['ticket']}  {out['status']}"
        + (f" ({out['stop_reason']})" if out["stop_reason"] else "")
    )
    cmd.stdout.write(
        f"  steps {out['steps']}  tokens {out['input_tokens'] + out['output_tokens']}  cost {out['cost_micros']} micro-USD  refunded {out['refunds_cents']} cents  · {out['provider']}/{out['model']}"
    )
    if out["pending_approval_id"]:
        cmd.stdout.write(
            f"  waiting for approval {out['pending_approval_id']}: {out['pending_approval_preview'].splitlines()[0]}"
        )
        cmd.stdout.write(
            f"  decide with: python manage.py decide {out['pending_approval_id']} approve|deny --as EMAIL"
        )
    if out["summary"]:
        cmd.stdout.write("  " + out["summary"].replace("\n", "\n  "))
