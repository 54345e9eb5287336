"""``python manage.py approvals [--merchant M] [--pending] [--json]``: what is waiting for a person."""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone

from approvals.selectors import approval_row, approvals_list, duration
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Merchant


class Command(DeskhandCommand):
    help = "List approvals: id, run, tool, preview, hash, age and expiry (escalated ones flagged)."
    not_done = "no approvals were listed"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--merchant", help="only this merchant (its slug, e.g. northwind)")
        parser.add_argument(
            "--pending", action="store_true", help="only approvals still waiting for a decision"
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        parser.add_argument("--limit", type=int, default=200)

    def handle(self, *args: Any, **opts: Any) -> None:
        slug = opts["merchant"]
        if slug and not Merchant.objects.filter(slug=slug).exists():
            raise CliError(f"no merchant {slug!r}.", code="not_found")
        if opts["limit"] < 1:
            raise CliError("--limit must be at least 1.", code="usage", returncode=2)
        now = timezone.now()
        rows = [
            approval_row(a, now=now)
            for a in approvals_list(merchant_slug=slug, pending_only=opts["pending"])[
                : opts["limit"]
            ]
        ]
        if opts["json"]:
            for row in rows:
                self.stdout.write(json.dumps(row, sort_keys=True))
            return
        if not rows:
            self.stdout.write(
                "no approvals"
                + (" pending" if opts["pending"] else "")
                + (f" at {slug}" if slug else "")
                + "."
            )
            return
        for row in rows:
            self.stdout.write(_line(row))


def _line(row: dict[str, Any]) -> str:
    if row["status"] == "pending":
        expiry = (
            f"expires in {duration(row['expires_in_seconds'])}"
            if row["expires_in_seconds"] > 0
            else "expired"
        )
    else:
        by = f" by {row['decided_by']}" if row["decided_by"] else ""
        expiry = f"{row['status']}{by}"
    flag = "  ESCALATED" if row["escalated"] else ""
    preview = row["preview"].splitlines()[0] if row["preview"] else row["tool"]
    prior = "".join(
        f"\n    already done (run {p['run_id'][:8]}): {p['what']}" for p in row["prior_effects"]
    )
    return (
        f"{row['id']}  {row['status']:<9}  run {row['run_id']} ({row['ticket']})  {row['tool']}  "
        f"hash {row['args_hash'][:12]}  age {duration(row['age_seconds'])}  {expiry}{flag}\n    {preview}"
        f"{prior}"
    )
