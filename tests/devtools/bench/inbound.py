"""What inbound mail costs, and how long it takes through the real receiver and a worker (issue 36).

Mail arrives one message at a time from strangers, so its cost is per message, apart from
the agent's per-step budget. Since intake is durable the receiving process only stores the
message and enqueues its workflow (``deskhand.inbound``); a worker threads it
(``mail.process``) and routes its line (``customer.route``), which may open a run.

**In process**, for four shapes a support inbox sees — a plain first message, an HTML-only
one, a reply quoting the thread, one with a PDF attached — automatic runs off:

* ``parse_cpu_ms``: the bytes read into a message, its structure checked, its text and
  attachments taken out, the auto-reply headers read and the quoted history trimmed, CPU
  of this thread, median;
* ``store_ms`` / ``store_p95_ms`` / ``store_cpu_ms``: ``inbound_received``, what the SMTP
  receiver and the webhook do before they answer — the row stored once and its workflow
  enqueued (an INSERT into DBOS's queue and a NOTIFY), call to return, wall and CPU;
* ``process_ms`` / ``process_cpu_ms``: ``inbound_process`` on a stored row, the worker's
  first step — the checks, the volume counts, the customer and ticket, the thread line —
  wall and CPU, median.

**Through the real thing**: our aiosmtpd receiver (``InboundHandler``) in this process and a
real worker process (``python -m tests.devtools.load.worker``, the bench's load model) on the
same database, Northwind opening a run on every customer message. Each message is from a
new customer, so each opens a ticket and a run. "Arrival" is the client sending ``DATA``
(the session before it is the sending server's, and a real one reuses it):

* ``answer``: arrival → the ``250`` received by the client;
* ``first_step``: arrival → the ``created_at`` of the first step row of the run the
  message opened (``InboundEmail.thread_message.routed_run``), written by the worker;
* ``single_*``: ``SINGLES`` messages one at a time, each sent once the previous one's run has
  its first step and has stopped working (parked or ended);
* ``burst_*``: ``burst`` messages at once from ``clients`` concurrent SMTP clients (``--clients``);
  ``burst_all_threaded_s`` / ``burst_all_started_s``: the burst's first send → the last of
  its messages on a thread / the last of its runs' first steps (the rows' own times);
* ``burst_over_single_answer_p95``: what a burst does to the answer (target ≤ 2: the work
  is the worker's, so the receiver should answer a burst about as fast as one message).
  The clients never pause, so with more of them than the machine has cores they queue at
  the receiver's CPU (N clients on C cores wait about N/C answers), whatever the receiver
  does: the target is read from no more clients than cores, the default.

Intake is one message at a time per merchant (in arrival order), so a burst's first steps
queue behind each other by design; the answer must not.
"""

from __future__ import annotations

import itertools
import os
import smtplib
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from tests.devtools.bench.fleet import Worker, database_url
from tests.devtools.bench.probes import Progress, median, pct, until

TO = "support@northwind.test"
QUOTED = "\n".join(f"> line {i} of what we wrote before, quoted back to us" for i in range(40))
SHAPES = ("plain", "html", "reply", "attachment")
SINGLES = 20


def _mail(shape: str, sender: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Bench Customer <{sender}>"
    msg["To"] = TO
    msg["Subject"] = "Re: My order" if shape == "reply" else "My order has not arrived"
    msg["Date"] = format_datetime(timezone.now())
    msg["Message-ID"] = f"<{sender.replace('@', '.')}@mail.example.org>"
    text = "Hello, my order has not arrived yet. Could you look into it, please?"
    if shape == "html":
        msg.set_content(f"<html><body><p>{text}</p><p><b>Thanks</b>, Sam</p></body></html>", "html")
    elif shape == "reply":
        msg.set_content(f"{text}\n\nOn Fri, Northwind Coffee wrote:\n{QUOTED}\n")
    else:
        msg.set_content(text)
    if shape == "attachment":
        msg.add_attachment(
            b"%PDF-1.4\n" + os.urandom(20_000),
            maintype="application",
            subtype="pdf",
            filename="receipt.pdf",
        )
    return msg.as_bytes()


def _parse(raw: bytes) -> None:
    from deskhand.domain.mail import hygiene, parse

    msg = parse.message_from_bytes(raw)
    parse.structure_problem(msg)
    parse.content(msg)  # text (HTML made text), the quoted history trimmed, attachments
    hygiene.automated(msg, from_address=parse.sender(msg)[1])


def _ms(seconds: float, digits: int = 1) -> float:
    return round(seconds * 1000, digits)


def costs(samples: int) -> dict[str, Any]:
    """Parse, store and process, per shape, in this process (automatic runs off)."""
    from agent.customer.route import customer_line_route
    from deskhand.domain.mail.intake import inbound_received, inbound_store
    from deskhand.domain.mail.models import InboundStatus
    from deskhand.domain.mail.process import inbound_process

    made = itertools.count()
    lines: list[int] = []

    def processed(raw: bytes) -> tuple[float, float]:
        row, _ = inbound_store(raw=raw, source="smtp", envelope_recipients=[TO])
        t0, c0 = time.perf_counter(), time.thread_time()
        done = inbound_process(row.pk)
        took = time.perf_counter() - t0, time.thread_time() - c0
        if done is None or done.status != InboundStatus.THREADED:
            raise RuntimeError(f"a bench message was not threaded: {done and done.reason}")
        lines.append(int(done.thread_message_id))  # type: ignore[arg-type]
        return took

    out: dict[str, Any] = {}
    for shape in SHAPES:

        def mail(kind: str, shape: str = shape) -> bytes:
            return _mail(shape, f"{kind}-{shape}-{next(made)}@bench.example.org")

        for _ in range(3):  # warm: imports, compiled patterns, prepared statements
            _parse(mail("warm"))
            processed(mail("warm"))
        parse_cpu, store, store_cpu, process, process_cpu = [], [], [], [], []
        for _ in range(samples):
            raw = mail("parse")
            c0 = time.thread_time()
            _parse(raw)
            parse_cpu.append(time.thread_time() - c0)
        for _ in range(samples):
            raw = mail("store")
            t0, c0 = time.perf_counter(), time.thread_time()
            row = inbound_received(raw=raw, source="smtp", envelope_recipients=[TO])
            store.append(time.perf_counter() - t0)
            store_cpu.append(time.thread_time() - c0)
            if row.status != InboundStatus.RECEIVED:
                raise RuntimeError(f"a {shape} bench message was {row.status}: {row.reason}")
        for _ in range(samples):
            wall, cpu = processed(mail("process"))
            process.append(wall)
            process_cpu.append(cpu)
        out[shape] = {
            "bytes": len(raw),
            "parse_cpu_ms": _ms(median(parse_cpu), 2),
            "store_ms": _ms(median(store)),
            "store_p95_ms": _ms(pct(store, 95)),
            "store_cpu_ms": _ms(median(store_cpu)),
            "process_ms": _ms(median(process)),
            "process_cpu_ms": _ms(median(process_cpu)),
        }
    # The lines processed here are routed here too, untimed, while runs are off: otherwise
    # the worker's sweep would route them later, in the middle of the latency figures.
    for line in lines:
        customer_line_route(line)
    return out


@contextmanager
def smtp_receiver() -> Iterator[int]:
    """Our SMTP receiver on a free loopback port, in this process; yields the port."""
    from aiosmtpd.controller import Controller

    from deskhand.domain.mail.smtp import InboundHandler, smtp_options
    from tests.devtools.bench.api import free_port

    controller = Controller(
        InboundHandler(), hostname="127.0.0.1", port=free_port(), **smtp_options()
    )
    controller.start()
    try:
        yield int(controller.port)
    finally:
        controller.stop()


@dataclass(frozen=True)
class Delivery:
    sender: str
    arrived: float  # wall clock (epoch seconds), comparable with the worker's timestamps
    answer_s: float


def deliver(port: int, sender: str) -> Delivery:
    """One plain message over SMTP, as a sending server does; timed from DATA to the 250."""
    wire = _mail("plain", sender).replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
        smtp.ehlo()
        for code, answer in (smtp.mail(sender), smtp.rcpt(TO)):
            if code != 250:
                raise RuntimeError(f"the receiver refused {sender}: {code} {answer!r}")
        arrived, t0 = time.time(), time.perf_counter()
        smtp.data(wire)  # raises unless 250
        return Delivery(sender, arrived, time.perf_counter() - t0)


@dataclass(frozen=True)
class Outcome:
    threaded_at: float | None
    routing: str
    detail: str
    run_id: Any
    first_step_at: float | None


def outcomes(senders: list[str]) -> dict[str, Outcome]:
    """Where each sender's message is: threaded when, the run it opened, its first step when."""
    from django.db.models import Min

    from agent.models import Step
    from deskhand.domain.mail.models import InboundEmail

    close_old_connections()
    rows = list(
        InboundEmail.objects.filter(from_address__in=senders).values_list(
            "from_address",
            "processed_at",
            "thread_message__routing",
            "thread_message__routing_detail",
            "thread_message__routed_run_id",
        )
    )
    runs = [r[4] for r in rows if r[4] is not None]
    first = dict(
        Step.objects.filter(run_id__in=runs)
        .values("run_id")
        .annotate(first=Min("created_at"))
        .values_list("run_id", "first")
    )
    return {
        sender: Outcome(
            at.timestamp() if at else None,
            routing or "",
            detail or "",
            run,
            first[run].timestamp() if run in first else None,
        )
        for sender, at, routing, detail, run in rows
    }


def _started(senders: list[str], timeout: float) -> dict[str, Outcome]:
    """Poll until every sender's message opened a run that has its first step; else raise."""
    found: dict[str, Outcome] = {}

    def done() -> bool:
        found.clear()
        found.update(outcomes(senders))
        for sender in senders:
            o = found.get(sender)
            if o is not None and o.routing and o.routing not in ("pending", "opened"):
                raise RuntimeError(f"{sender}'s message opened no run: {o.detail}")
        return len(found) == len(senders) and all(o.first_step_at for o in found.values())

    if not until(done, timeout, every=0.02):
        waiting = [s for s in senders if not (s in found and found[s].first_step_at)]
        raise RuntimeError(
            f"after {timeout:.0f} s, {len(waiting)} of {len(senders)} messages had no run with"
            f" a first step (the worker's log says why); first: {waiting[0]}"
        )
    return found


def _settled(run_id: Any, timeout: float = 30) -> None:
    """Until the run stopped working (parked or ended), so the next single finds the worker idle."""
    from agent.models import Run, RunStatus

    def still() -> bool:
        close_old_connections()
        return not Run.objects.filter(
            pk=run_id, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)
        ).exists()

    until(still, timeout, every=0.02)


def _drained(timeout: float) -> None:
    """Until every stored message is processed and every customer line routed.

    Untimed, so the bench kicks the worker's queues while it waits: one merchant's messages
    are taken one at a time, and the next one otherwise waits for the queue's next poll.
    """
    from deskhand.domain.desk.models import Routing, TicketMessage
    from deskhand.domain.mail.models import InboundEmail, InboundStatus
    from deskhand.infra.dbos.client import notify_queue

    def idle() -> bool:
        close_old_connections()
        notify_queue()
        return not (
            InboundEmail.objects.filter(status=InboundStatus.RECEIVED).exists()
            or TicketMessage.objects.filter(routing=Routing.PENDING).exists()
        )

    if not until(idle, timeout, every=0.05):
        raise RuntimeError(f"the worker did not process the stored messages in {timeout:.0f} s")


def latency(port: int, burst: int, clients: int, progress: Progress) -> dict[str, Any]:
    """Singles one at a time, then the burst; every figure from the rows' own times."""
    progress.phase(f"{SINGLES} single messages through SMTP and the worker")
    answers, first_steps = [], []
    for i in range(-1, SINGLES):  # the first is not counted: a fresh thread connects
        sent = deliver(port, f"single-{i + 1}@bench.example.org")
        o = _started([sent.sender], 60)[sent.sender]
        assert o.first_step_at is not None
        if i >= 0:
            answers.append(sent.answer_s)
            first_steps.append(o.first_step_at - sent.arrived)
        _settled(o.run_id)

    progress.phase(f"a burst of {burst} messages from {min(clients, burst)} SMTP clients")
    senders = [f"burst-{i}@bench.example.org" for i in range(burst)]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=min(clients, burst)) as pool:
        sent_all = list(pool.map(lambda s: deliver(port, s), senders))
    answered_s = max(d.arrived + d.answer_s for d in sent_all) - t0
    # Generous: after the arrivals, each of the merchant's messages may wait for a queue poll.
    found = _started(senders, 120 + burst * 1.5 * settings.DESKHAND_QUEUE_POLL_SEC)
    burst_answers = [d.answer_s for d in sent_all]
    burst_first = [found[d.sender].first_step_at - d.arrived for d in sent_all]  # type: ignore[operator]
    single_p95 = pct(answers, 95)
    return {
        "singles": SINGLES,
        "single_answer_p50_ms": _ms(median(answers)),
        "single_answer_p95_ms": _ms(pct(answers, 95)),
        "single_first_step_p50_ms": _ms(median(first_steps)),
        "single_first_step_p95_ms": _ms(pct(first_steps, 95)),
        "burst": burst,
        "burst_clients": min(clients, burst),
        "burst_answer_p50_ms": _ms(median(burst_answers)),
        "burst_answer_p95_ms": _ms(pct(burst_answers, 95)),
        "burst_first_step_p50_ms": _ms(median(burst_first)),
        "burst_first_step_p95_ms": _ms(pct(burst_first, 95)),
        "burst_all_answered_s": round(answered_s, 2),
        "burst_all_threaded_s": round(max(o.threaded_at or 0 for o in found.values()) - t0, 2),
        "burst_all_started_s": round(max(o.first_step_at or 0 for o in found.values()) - t0, 2),
        "burst_threaded": sum(o.threaded_at is not None for o in found.values()),
        "burst_started": sum(o.first_step_at is not None for o in found.values()),
        "burst_over_single_answer_p95": round(pct(burst_answers, 95) / single_p95, 2),
    }


def measure(
    samples: int,
    burst: int,
    *,
    clients: int,
    server: dict[str, Any],
    dbname: str,
    progress: Progress,
) -> dict[str, Any]:
    """The in-process costs, then the latencies through a receiver here and a worker process.

    Expects no executor in this process: the worker alone takes the intake queue.
    """
    from deskhand.domain.desk.models import AutoRuns, Merchant

    # The bench is the flood the hourly limits are there to stop.
    Merchant.objects.update(
        auto_runs=AutoRuns.OFF,
        inbound_per_sender_per_hour=10**6,
        inbound_per_address_per_hour=10**6,
    )
    progress.phase(f"parse, store and process, {samples} of each shape")
    out: dict[str, Any] = {"samples": samples, "shapes": costs(samples)}

    logs = Path(tempfile.mkdtemp(prefix="deskhand-bench-inbound-"))
    env = {
        **os.environ,
        "DATABASE_URL": database_url(server, dbname),
        "PYTHONUNBUFFERED": "1",
        "DESKHAND_LOG_LEVEL": "WARNING",
    }
    # The worker at the lowest CPU priority: in production receivers and workers run apart,
    # and on these two cores a worker opening 200 runs at once would otherwise take the CPU
    # the receiver answers with (Postgres is still shared). Measured 2026-12-07 without it:
    # burst answer p95 1,455 ms against 33 ms for one message (docs/benchmarks.md).
    worker = Worker("bench-inbound", env, logs, nice=19)
    progress.phase("a worker process; it threads what the store figures left queued")
    worker.start()
    try:
        # Runs still off: the stored messages it processes first open none.
        _drained(60 + len(SHAPES) * samples)
        Merchant.objects.filter(slug="northwind").update(auto_runs=AutoRuns.EVERY_MESSAGE)
        with smtp_receiver() as port:
            out["smtp"] = latency(port, burst, clients, progress)
    finally:
        worker.stop()
    out["smtp"]["worker_log"] = str(worker.log)
    return out
