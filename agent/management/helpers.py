"""Shared plumbing for the management commands: who is acting, waiting, printing."""

from __future__ import annotations

import json
import time
from typing import Any

from django.contrib.auth import get_user_model

from agent.models import TERMINAL_STATUSES, Run, RunStatus
from agent.run.selectors import run_outcome
from deskhand.domain.cli import CliError


def user_by_email(email: str) -> Any:
    User = get_user_model()
    user = User.objects.filter(email__iexact=email.strip()).first()
    if user is None:
        raise CliError(f"no user with email {email!r}.", code="not_found")
    if not user.is_active:
        raise CliError(
            f"{user.email} is deactivated and may no longer act; their past acts stay on record.",
            code="not_allowed",
        )
    return user


def run_by_id(run_id: str) -> Run:
    import uuid

    try:
        uuid.UUID(run_id)
    except ValueError:
        raise CliError(f"{run_id!r} is not a run id (expected a UUID).", code="invalid") from None
    run = Run.objects.select_related("ticket", "merchant").filter(pk=run_id).first()
    if run is None:
        raise CliError(f"no run {run_id}.", code="not_found")
    return run


def wait_for_rest(run: Run, timeout: float) -> Run:
    """Until the run is terminal, being cancelled, or waiting for a person (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if run.status in TERMINAL_STATUSES or run.status == RunStatus.CANCELLING:
            return run
        if (
            run.status == RunStatus.AWAITING_APPROVAL
            and run.approvals.filter(status="pending").exists()
        ) or run.status == RunStatus.AWAITING_CUSTOMER:  # it waits for the customer's answer
            return run
        if time.monotonic() > deadline:
            raise CliError(
                f"run {run.id} is still {run.status} after {timeout:.0f}s; is a worker running (python manage.py worker)?",
                code="timeout",
            )
        time.sleep(0.2)


def money_line(out: dict[str, Any]) -> str:
    """The run's refunds, three ways: moved, in flight at a provider, approved and not moved."""
    line = f"refunded {out['refunds_cents']} cents"
    if out["refunds_in_flight_cents"]:
        line += f", {out['refunds_in_flight_cents']} cents in flight (not yet confirmed)"
    if out["refunds_not_moved_cents"]:
        line += f", {out['refunds_not_moved_cents']} cents approved and not moved"
    return line


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
        f"  steps {out['steps']}  tokens {out['input_tokens'] + out['output_tokens'] + out.get('cache_read_tokens', 0) + out.get('cache_write_tokens', 0)}  cost {out['cost_micros']} micro-USD  {money_line(out)}  · {out['provider']}/{out['model']}"
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
