"""The CLI: clear sentences and non-zero exits for bad input; JSON outcomes for scripts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.models import Run
from tests.fixtures.dbos import ROOT, test_database_url

pytestmark = pytest.mark.django_db(transaction=True)


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"DATABASE_URL": test_database_url(), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_ticket_wait_json_prints_the_outcome(dbos_executor, capsys):
    call_command("run_ticket", "NW-1", "--wait", "--json")
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["status"] == "awaiting_approval"
    assert out["pending_approval_id"]
    for key in ("run_id", "stop_reason", "steps", "cost_micros", "refunds_cents", "summary"):
        assert key in out
    call_command(
        "decide",
        out["pending_approval_id"],
        "approve",
        "--as",
        "owner@northwind.test",
        "--wait",
        "--json",
    )
    done = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert done["status"] == "succeeded" and done["refunds_cents"] == 3800


def test_a_second_open_run_on_a_ticket_is_refused(dbos_executor):
    call_command("run_ticket", "NW-2")
    with pytest.raises(CommandError, match="already has an open run"):
        call_command("run_ticket", "NW-2")
    assert Run.objects.filter(ticket__reference="NW-2").count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run_ticket", "NW-99"], "no ticket 'NW-99'"),
        (["run_ticket", "NW-1", "--as", "viewer@northwind.test"], "viewer"),
        (["run_ticket", "NW-1", "--as", "owner@lumen.test"], "has no role"),
        (["run_ticket", "NW-1", "--as", "nobody@example.com"], "no user"),
        (["cancel", "not-a-uuid", "--as", "owner@northwind.test"], "not a run id"),
        (
            ["cancel", "00000000-0000-0000-0000-000000000000", "--as", "owner@northwind.test"],
            "no run",
        ),
        (
            [
                "decide",
                "00000000-0000-0000-0000-000000000000",
                "approve",
                "--as",
                "owner@northwind.test",
            ],
            "no approval",
        ),
    ],
)
def test_bad_input_is_refused_with_one_sentence(tseeded, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(*args)
    assert Run.objects.count() == 0


def test_a_refusal_exits_non_zero_without_a_traceback(tseeded):
    for args, message in (
        (["run_ticket", "NW-99"], "no ticket 'NW-99'"),
        (["decide", "xyz", "maybe", "--as", "a@b.c"], "invalid choice"),
    ):
        result = manage(*args)
        assert result.returncode != 0
        assert message in result.stderr
        assert "Traceback" not in result.stderr
    assert Run.objects.count() == 0
