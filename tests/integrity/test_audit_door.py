"""Every audit write goes through one door: ``approvals.audit.audit_record``.

The trail is append-only, so what a row holds (who, the snapshot of their name, which run,
which words) is decided in one function; a write anywhere else would bypass it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "approvals", "deskhand")
DOOR = Path("approvals/audit.py")

# Any way of making a row: the manager's creators, or the model's constructor (then .save()).
WRITE = re.compile(
    r"(?<!class )\bAuditEvent(?:\.objects\.(?:create|bulk_create|get_or_create|update_or_create)\b|\()"
)


def test_only_the_audit_service_creates_audit_events() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts and path.relative_to(ROOT) != DOOR
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WRITE.search(line)
    ]
    assert found == [], "write audit events with approvals.audit.audit_record:\n" + "\n".join(found)


def test_the_door_is_where_the_test_looks() -> None:
    assert WRITE.search((ROOT / DOOR).read_text())
