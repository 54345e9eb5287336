"""``manage.py approvals``: what waits for a person, with the facts an approver needs."""

from __future__ import annotations

import datetime as dt
import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.consent.gate import gate_request
from approvals.models import Approval
from approvals.services import approval_decide
from tests.consent.conftest import bare_run, gate_call
from tests.durability.helpers import user

pytestmark = pytest.mark.django_db(transaction=True)


def _run(*args: str) -> str:
    out = StringIO()
    call_command("approvals", *args, stdout=out)
    return out.getvalue()


def test_the_approvals_command_lists_id_run_tool_preview_hash_age_and_expiry(tseeded):
    nw_run = bare_run()
    nw = Approval.objects.get(pk=gate_request(str(nw_run.id), 1, gate_call(3800)).approval_id)
    lu_run = bare_run("LU-2", "owner@lumen.test")
    lu = Approval.objects.get(
        pk=gate_request(str(lu_run.id), 1, gate_call(17900, "toolu_lu", "LU-2311")).approval_id
    )
    Approval.objects.filter(pk=lu.pk).update(
        requested_at=lu.requested_at - dt.timedelta(hours=2, minutes=5)
    )
    approval_decide(approval=nw, user=user("agent@northwind.test"), approve=False, reason="no")

    rows = [json.loads(line) for line in _run("--json").splitlines()]
    assert [r["id"] for r in rows] == [str(nw.pk), str(lu.pk)]  # newest first
    lu_row = rows[1]
    assert lu_row["run_id"] == str(lu_run.id) and lu_row["ticket"] == "LU-2"
    assert lu_row["tool"] == "issue_refund"
    assert lu_row["preview"] == lu.preview and lu_row["args_hash"] == lu.args_hash
    assert lu_row["arguments"]["amount_cents"] == 17900
    assert 2 * 3600 + 300 <= lu_row["age_seconds"] < 2 * 3600 + 360
    assert lu_row["expires_at"] == lu.expires_at.isoformat() and lu_row["expires_in_seconds"] > 0
    assert (lu_row["status"], lu_row["escalated"]) == ("pending", False)
    assert (rows[0]["status"], rows[0]["decided_by"], rows[0]["reason"]) == (
        "denied",
        "agent@northwind.test",
        "no",
    )

    assert [json.loads(x)["id"] for x in _run("--json", "--pending").splitlines()] == [str(lu.pk)]
    assert [
        json.loads(x)["id"] for x in _run("--json", "--merchant", "northwind").splitlines()
    ] == [str(nw.pk)]
    text = _run("--pending")
    assert str(lu.pk) in text and str(lu_run.id) in text and lu.args_hash[:12] in text
    assert "age 2h05m" in text and re.search(r"expires in 23h5\dm", text)
    assert "Refund 179.00 USD against order LU-2311 — stale beans" in text
    assert (
        _run("--pending", "--merchant", "northwind").strip() == "no approvals pending at northwind."
    )
    with pytest.raises(CommandError, match=r"^no merchant 'nowhere'\.$"):
        _run("--merchant", "nowhere")
