"""The JSON API's two latencies, over a real web process: ``manage.py web`` on a free port.

- ``webhook_to_ticket_stored``: a signed help-desk ``ticket.created`` sent → its ``201``
  received. The answer comes after the transaction that stores the ticket, its thread line
  and the delivery has committed, so the round trip is the time to "ticket stored".
- ``api_run_to_first_step``: ``POST /api/v1/runs`` sent (wall clock) → the run's first DBOS
  step started (DBOS's step clock, the same machine's), with the bench's in-process executor
  idle and one run at a time, as ``enqueue_to_first_step`` is measured. Its runs are QUICK
  tickets (one read, then done), so nothing is left parked for the later figures.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from standardwebhooks import Webhook

from tests.devtools.bench.fleet import ROOT, database_url
from tests.devtools.bench.probes import Progress, median, pct, until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WebProcess:
    """``manage.py web`` on the scratch database; its log goes to ``logs``, never the tree."""

    def __init__(self, server: dict[str, Any], dbname: str, logs: Path) -> None:
        self.port = free_port()
        self.log = logs / "web.log"
        env = {
            **os.environ,
            "DATABASE_URL": database_url(server, dbname),
            "PYTHONUNBUFFERED": "1",
            "DESKHAND_LOG_LEVEL": "WARNING",
            "DESKHAND_API_KEY_LIMIT": "100000",  # the rate limit is not what is measured
        }
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "web", "--port", str(self.port), "--no-access-log"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

        def up() -> bool:
            if self.proc.poll() is not None:
                return True
            try:
                return self.request("GET", "/healthz")[0] < 500
            except OSError:
                return False

        if not until(up, 60, every=0.1) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"bench web process did not start:\n{self.log.read_text()[-2000:]}")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw or b"null")
            except ValueError:
                return r.status, raw[:200]
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _ended(run_id: str) -> bool:
    from agent.models import Run

    return Run.objects.filter(
        pk=run_id, status__in=("succeeded", "failed", "exhausted", "cancelled")
    ).exists()


def measure(
    web: WebProcess, samples: int, start: int, progress: Progress, out: dict[str, Any]
) -> None:
    """Both figures, ``samples`` each, into ``out`` (see the module)."""
    import random

    from django.db import close_old_connections

    from deskhand.domain.apikeys.helpdesk import source_create
    from deskhand.domain.apikeys.services import key_create
    from deskhand.domain.desk.models import Merchant
    from deskhand.infra.dbos.client import workflow_steps
    from tests.devtools.load.world import QUICK, load_world, owners

    progress.phase("API over a real web process: help-desk webhook → ticket; start a run")
    close_old_connections()
    who = owners()
    # Round-robin over the merchants: enough that the first has ``samples`` of them.
    tickets = load_world(samples * Merchant.objects.count(), start=start, prefix=QUICK)
    merchant = tickets[0].merchant
    owner = who[merchant.pk]
    source, secret = source_create(merchant=merchant, user=owner, slug="bench-desk")
    signer = Webhook(secret)
    _, token = key_create(merchant=merchant, user=owner, name="bench", scopes=["read", "write"])

    # One uncounted delivery and one uncounted read first: a fresh process's first request
    # imports and connects, which no later one does.
    stored: list[float] = []
    for i in range(-1, samples):
        body = json.dumps(
            {
                "type": "ticket.created",
                "external_id": f"BENCH-{start + i}",
                "customer": {"email": f"bench{i}@example.com", "name": "Bench"},
                "subject": "A bench ticket",
                "body": "Where is my order?",
            }
        )
        wid = f"msg_bench_{start + i}"
        stamp = dt.datetime.now(tz=dt.UTC).replace(microsecond=0)
        headers = {
            "webhook-id": wid,
            "webhook-timestamp": str(int(stamp.timestamp())),
            "webhook-signature": signer.sign(wid, stamp, body),
            "Content-Type": "application/json",
        }
        t0 = time.perf_counter()
        status, answer = web.request(
            "POST", f"/api/v1/helpdesk/{merchant.slug}/{source.slug}", body.encode(), headers
        )
        took = time.perf_counter() - t0
        if status != 201:
            raise RuntimeError(f"the bench's help-desk webhook was answered {status}: {answer}")
        if i >= 0:
            stored.append(took)
            progress.advance(1 / samples)

    started: list[float] = []
    ours = [t for t in tickets if t.merchant_id == merchant.pk][:samples]
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    web.request("GET", "/api/v1/runs?limit=1", headers=auth)
    for ticket in ours:
        time.sleep(random.uniform(0.05, 0.35))  # arrive at a random point of the queue poll
        sent_ms = time.time() * 1000
        status, answer = web.request(
            "POST", "/api/v1/runs", json.dumps({"ticket": ticket.reference}).encode(), auth
        )
        if status != 201:
            raise RuntimeError(f"the bench's POST /api/v1/runs was answered {status}: {answer}")
        run_id = answer["id"]
        if not until(partial(_ended, run_id), 30, every=0.02):
            raise RuntimeError(f"the run {run_id} started through the API did not end in 30 s")
        first = min(
            (s["started_at_epoch_ms"] for s in workflow_steps(run_id) if s["started_at_epoch_ms"]),
            default=None,
        )
        if first is not None:
            started.append((first - sent_ms) / 1000)
        progress.advance(1 / max(len(ours), 1))
    out.update(
        api_samples=samples,
        webhook_to_ticket_stored_p50_ms=round(median(stored) * 1000, 1),
        webhook_to_ticket_stored_p95_ms=round(pct(stored, 95) * 1000, 1),
        api_run_to_first_step_p50_ms=round(median(started) * 1000, 1),
        api_run_to_first_step_p95_ms=round(pct(started, 95) * 1000, 1),
    )
