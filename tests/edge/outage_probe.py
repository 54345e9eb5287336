"""Run inside ``manage.py shell`` with DATABASE_URL at a closed port: each command and page once.

Prints one JSON line per probe, for tests/edge/test_cli_conventions.py to judge.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from django.core.management import get_commands, load_command_class
from django.test import Client

RUN = "00000000-0000-0000-0000-000000000000"
OWNER = "owner@northwind.test"

COMMANDS = [
    ["run_ticket", "NW-1"],
    ["run_ticket", "nw-1", "--wait", "--json"],
    ["cancel", RUN, "--as", OWNER],
    ["cancel", RUN, "--as", OWNER, "--json"],
    ["decide", RUN, "approve", "--as", OWNER],
    ["steer", RUN, "a note", "--as", OWNER],
    ["approvals", "--pending"],
    ["approvals", "--json"],
    ["replay", RUN],
    ["seed"],
    ["bench", "--parked", "1", "--runs", "1", "--samples", "1", "--wake", "0"],
    ["effects_findings"],
    ["effects_findings", "--json"],
    ["workflow_findings"],
    ["workflow_findings", "--json"],
    ["erase_customer", "someone@example.test", "--as", OWNER],
    ["health"],
    ["health", "--json"],
    ["move_runs", "--from", "deskhand-0.0.1"],
    ["webhook", "northwind", "--as", OWNER, "--off"],
    ["deactivate_user", "viewer@northwind.test"],
    ["merchant", "create", "--name", "Harbor", "--slug", "harbor", "--owner", "o@harbor.test"],
    ["merchant", "limits", "northwind", "--retention-days", "30", "--json"],
    ["import_orders", "--merchant", "northwind", "orders.csv"],
    ["provider_check"],  # needs no database: it still ends in one sentence (no key here)
]


def run_command(argv: list[str]) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        command = load_command_class(get_commands()[argv[0]], argv[0])
        try:
            command.run_from_argv(["manage.py", *argv])
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # what would have been a traceback
            code = f"uncaught {type(exc).__name__}: {exc}"
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def web(method: str, path: str, **data: str) -> dict[str, object]:
    c = Client(raise_request_exception=False)
    c.cookies["sessionid"] = "x" * 32  # a signed-in browser: its session must be read
    response = getattr(c, method)(path, data) if data else getattr(c, method)(path)
    body = b"" if response.streaming else response.content
    return {"path": path, "status": response.status_code, "body": body.decode()}


def main() -> None:
    for argv in COMMANDS:
        print(json.dumps(run_command(argv)), file=sys.__stdout__)
    for method, path, data in (
        ("get", "/", {}),
        ("get", "/tickets/NW-1/", {}),
        ("get", "/runs/stream", {}),
        ("get", "/admin/", {}),
        ("post", "/accounts/login/", {"username": OWNER, "password": "x"}),
    ):
        print(json.dumps(web(method, path, **data)), file=sys.__stdout__)
