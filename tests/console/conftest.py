"""Console test fixtures: two tenants always in play, runs built from rows directly.

``fake_dbos`` stands in for the DBOS client (enqueue, send, cancel), so page
and action tests need no worker; the browser and SSE tests use real processes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from agent.models import Run, Step
from agent.record.steplog import log_step
from agent.steps import ModelPayload, ToolPayload
from approvals.models import Approval
from deskhand.domain.desk.models import Ticket
from tests.devtools import forkserver
from tests.support.waiting import PATIENCE_S

PASSWORD = "demo-password-123"
NW_OWNER, NW_AGENT, NW_VIEWER = (
    "owner@northwind.test",
    "agent@northwind.test",
    "viewer@northwind.test",
)
LU_OWNER = "owner@lumen.test"
AUDITOR = "auditor@deskhand.test"


def user(email: str) -> Any:
    return get_user_model().objects.get(username=email)


def client_for(email: str, **kwargs: Any) -> Client:
    c = Client(**kwargs)
    c.force_login(user(email))
    return c


@pytest.fixture
def nw_owner(seeded) -> Client:
    return client_for(NW_OWNER)


@pytest.fixture
def nw_viewer(seeded) -> Client:
    return client_for(NW_VIEWER)


@pytest.fixture
def lu_owner(seeded) -> Client:
    return client_for(LU_OWNER)


class FakeClient:
    """Records what the web process would have asked DBOS to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def enqueue(self, options: dict[str, Any], *args: Any) -> None:
        self.calls.append(("enqueue", options["workflow_id"]))

    def send(
        self,
        destination: str,
        message: Any,
        topic: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.calls.append(("send", (destination, message, topic)))

    def cancel_workflow(self, workflow_id: str, *, cancel_children: bool = False) -> None:
        # The real DBOSClient's signature: a run's model calls are its child workflows.
        assert cancel_children, "a run is cancelled with its children (its model calls)"
        self.calls.append(("cancel", workflow_id))

    def list_workflows(self, **kwargs: Any) -> list[Any]:
        return []  # no workflow exists: these runs were built from rows


@pytest.fixture
def fake_dbos(monkeypatch) -> Iterator[FakeClient]:
    fake = FakeClient()
    monkeypatch.setattr("deskhand.infra.dbos.client.client", lambda: fake)
    yield fake


def make_run(
    reference: str, merchant_slug: str = "northwind", *, status: str = "running", **fields: Any
) -> Run:
    ticket = Ticket.objects.get(reference=reference, merchant__slug=merchant_slug)
    now = timezone.now()
    defaults: dict[str, Any] = dict(
        merchant_id=ticket.merchant_id,
        ticket=ticket,
        provider="scripted",
        model="script-1",
        application_version="deskhand-1",
        status=status,
        prompt=f"Ticket reference: {reference}",
        max_steps=24,
        max_tokens=400_000,
        max_spend_micros=2_000_000,
        deadline_seconds=900,
        max_refund_cents=25_000,
        deadline_at=now + dt.timedelta(seconds=900),
        started_at=now,
    )
    defaults.update(fields)
    if status in ("succeeded", "failed", "exhausted", "cancelled"):
        defaults.setdefault("finished_at", now)
        defaults.setdefault("stop_reason", "end_turn" if status == "succeeded" else "error")
    return Run.objects.create(**defaults)


def model_step(run: Run, seq: int, text: str = "", tool: str = "", args: Any = None) -> Step:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    if tool:
        content.append(
            {"type": "tool_use", "id": f"toolu_{seq}", "name": tool, "input": args or {}}
        )
    return log_step(
        run_id=str(run.pk),
        seq=seq,
        kind="model",
        arguments={"message_count": seq},
        result=ModelPayload(content=content, stop_reason="tool_use" if tool else "end_turn"),
        input_tokens=1200,
        output_tokens=150,
        cost_micros=1000,
        latency_ms=420,
    )


def tool_step(run: Run, seq: int, tool: str, args: Any, text: str, **kwargs: Any) -> Step:
    return log_step(
        run_id=str(run.pk),
        seq=seq,
        kind="tool",
        tool=tool,
        tool_call_id=f"toolu_{seq - 1}",
        risk=kwargs.pop("risk", "read"),
        arguments=args,
        result=ToolPayload(text=text),
        latency_ms=12,
        **kwargs,
    )


def make_approval(
    run: Run, *, amount_cents: int = 1900, order: str = "NW-1042", **fields: Any
) -> Approval:
    now = timezone.now()
    args = {"order_reference": order, "amount_cents": amount_cents, "reason": "stale beans"}
    defaults: dict[str, Any] = dict(
        merchant_id=run.merchant_id,
        run=run,
        tool_call_id="toolu_gate",
        tool="issue_refund",
        arguments=args,
        args_hash="a" * 64,
        preview=f"Refund {amount_cents / 100:.2f} USD against order {order} — stale beans",
        requested_at=now - dt.timedelta(minutes=5),
        expires_at=now + dt.timedelta(hours=23),
    )
    defaults.update(fields)
    return Approval.objects.create(**defaults)


# --- a real ASGI web process on the test database ----------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebServer:
    def __init__(self, port: int, proc: forkserver.Process, log_path: Path) -> None:
        self.port, self.proc, self.log_path = port, proc, log_path
        self.url = f"http://127.0.0.1:{port}"

    def log(self) -> str:
        return self.log_path.read_text()[-6000:] if self.log_path.exists() else ""


@pytest.fixture
def web_server(tseeded) -> Iterator[WebServer]:
    """The web process (``manage.py web``) on a free port, on the test database."""
    with web_process_on_test_database("test-web.log") as server:
        yield server


@contextlib.contextmanager
def web_process_on_test_database(
    log_name: str, env: dict[str, str] | None = None
) -> Iterator[WebServer]:
    """A web process of its own, started as the README starts it (``manage.py web``:
    ``deskhand/infra/edge/web.py``), serving the test database until the block ends.

    ``env`` adds to (or overrides) the test process's environment, e.g.
    ``DESKHAND_TRUSTED_PROXIES``.
    """
    from tests.fixtures.dbos import test_database_url

    port = free_port()
    # Kept after the test, for a failure's post-mortem.
    log_path = ROOT / ".deskhand" / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(
        os.environ,
        DATABASE_URL=test_database_url(),
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="deskhand.settings",
    )
    full_env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the server keeps Django's async-safety guard
    full_env.update(env or {})
    log_path.write_bytes(b"")
    # `python -m manage` is `python manage.py` (the same file, the same sys.path[0]).
    proc = forkserver.start(
        "manage",
        ["web", "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
        full_env,
        log_path,
    )
    server = WebServer(port, proc, log_path)
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/accounts/login/", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"web server did not start:\n{server.log()}")
        time.sleep(0.2)
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def session_cookie(email: str) -> str:
    """A committed session for ``email`` (the cookie a browser would hold)."""
    c = Client()
    c.force_login(user(email))
    return f"sessionid={c.cookies['sessionid'].value}"
