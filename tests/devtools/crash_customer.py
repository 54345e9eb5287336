"""The crash sweep's customer case: "inbound mail → stored → run woken → reply sent".

Omar writes to Northwind's support address over SMTP (the real receiver, our aiosmtpd
handler, on a loopback port); Northwind runs automatically on new tickets, so a run opens,
asks him which order he means and parks on his answer. He answers in the thread; the run
wakes, reads the answer and replies. A real worker is SIGKILLed at one boundary:

- before the answer: as the question is claimed (``after_step:tool.ask_customer``), as the
  run parks (``after_step:customer.park``) or as it enters the wait (``before_wait:customer``);
- after it: as the stored answer is read (``after_step:customer.read``) or taken in
  (``after_step:customer.resume``).

The same executor id restarts and the world must show the question claimed once, two
replies sent (the question, then the answer), the answer read once and the waiting time
handed back once. The sweep (``manage.py crash_sweep --case customer``) and CI
(``tests/durability/test_crash_sweep.py``) run all five through this module.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiosmtpd.controller import Controller
from django.db import close_old_connections

from agent.models import TERMINAL_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from deskhand.domain.desk.models import Merchant, OutboundEmail, Ticket, TicketMessage
from deskhand.domain.mail.smtp import InboundHandler, smtp_options
from tests.devtools.crash import FINISHED, Boundary, Outcome, workflow_status
from tests.devtools.crashworker import Worker
from tests.devtools.evals.runner import reset_world
from tests.mail.conftest import free_port, mail
from tests.mail.test_smtp import send

OMAR = "omar.reyes@example.com"  # his order NW-1077 has shipped (the seed)
# Before the answer: the worker dies as it asks or parks; after: as it takes the answer in.
BEFORE_ANSWER = ("after_step:tool.ask_customer", "after_step:customer.park", "before_wait:customer")
AFTER_ANSWER = ("after_step:customer.read", "after_step:customer.resume")
BOUNDARIES = tuple(Boundary.parse(p) for p in BEFORE_ANSWER + AFTER_ANSWER)


def _spec(boundary: Boundary) -> str:
    return f"{boundary.point}:{boundary.target}:{boundary.nth}"


def _omar_writes(port: int, *, processed: bool = True, **kw: Any) -> None:
    send(port, mail(sender=f"Omar Reyes <{OMAR}>", **kw), sender=OMAR, processed=processed)


def _until[T](what: str, predicate: Callable[[], T | None], timeout: float) -> T:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        close_old_connections()
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout:.0f}s")


def prepare_world() -> None:
    """A freshly seeded world where Northwind runs on every new ticket."""
    reset_world()
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets")


def play(boundary: Boundary, *, timeout: float = 90.0) -> tuple[Run, Ticket, bool]:
    """One conversation with the worker killed at ``boundary``: the run, its ticket, whether
    the kill happened (a worker that exits -9 where it was told to)."""
    before = str(boundary) in {str(Boundary.parse(p)) for p in BEFORE_ANSWER}
    executor_id = f"sweep-customer-{secrets.token_hex(4)}"
    worker = Worker(executor_id, "")
    port = free_port()
    controller = Controller(InboundHandler(), hostname="127.0.0.1", port=port, **smtp_options())
    controller.start()
    fired = False
    try:
        worker.start(_spec(boundary) if before else "")
        _omar_writes(
            port,
            subject="Where is my order?",
            message_id=f"<omar-{executor_id}@mail.example.com>",
            body="Hello, my order still has not arrived and no tracking email came. Where is it?",
        )
        ticket = Ticket.objects.get(messages__message_id=f"<omar-{executor_id}@mail.example.com>")

        def parked() -> Run | None:
            run = Run.objects.filter(ticket=ticket).first()
            ok = run is not None and run.status == "awaiting_customer"
            return run if ok else None

        if before:
            _until("the worker was not killed", lambda: not worker.alive, timeout)
            fired = worker.killed
            worker.start("")  # the same executor id recovers its own workflow
            run = _until("no run parked on the customer", parked, timeout)
        else:
            run = _until("no run parked on the customer", parked, timeout)
            worker.kill()
            worker.start(_spec(boundary))
        question = _until(
            "no question was sent",
            lambda: OutboundEmail.objects.filter(ticket=ticket).first(),
            timeout,
        )
        _omar_writes(
            port,
            subject=f"Re: {question.subject}",
            message_id=f"<omar-answer-{executor_id}@mail.example.com>",
            headers={"In-Reply-To": question.thread_message.message_id},
            body="It is order NW-1077.",
            # A worker about to die on the answer may die before its intake is done: the
            # restarted worker finishes it. Not waited for here.
            processed=before,
        )
        if not before:
            _until("the worker was not killed", lambda: not worker.alive, timeout)
            fired = worker.killed
            worker.start("")

        def finished() -> bool:
            run.refresh_from_db()
            return run.status in TERMINAL_STATUSES and workflow_status(str(run.pk)) in FINISHED

        _until(f"the run did not finish (it is {run.status})", finished, timeout)
        return run, ticket, fired
    finally:
        worker.stop()
        controller.stop()


def check(run: Run, ticket: Ticket) -> list[str]:
    """What is wrong with the world after one conversation (empty: nothing)."""
    problems = []
    if run.status != "succeeded":
        problems.append(f"the run ended {run.status}: {run.summary}")
    runs = Run.objects.filter(ticket=ticket).count()
    if runs != 1:
        problems.append(f"{runs} runs on the ticket, not 1")
    claims = LedgerEntry.objects.filter(run=run, tool="ask_customer").count()
    if claims != 1:
        problems.append(f"the question was claimed {claims} times, not once")
    sent = TicketMessage.objects.filter(ticket=ticket, direction="out", run=run).count()
    if sent != 2:
        problems.append(f"{sent} messages to the customer, not 2 (the question, the reply)")
    rows = Step.objects.filter(run=run, tool="ask_customer", kind="tool")
    texts = [str(getattr(s.payload, "text", "")) for s in rows]
    answers = [t for t in texts if "The customer answered" in t]
    if len(answers) != 1 or "NW-1077" not in answers[0]:
        problems.append(f"the answer reached the model {len(answers)} times, not once")
    if not 0 < run.waited_seconds < 600:
        problems.append(f"waited {run.waited_seconds:.0f}s handed back (not once)")
    return problems


def sweep(points: tuple[Boundary, ...] | list[Boundary] = BOUNDARIES) -> Iterator[Outcome]:
    """Each boundary in turn, from a fresh world; a schedule that breaks fails with its reason."""
    for boundary in points:
        started = time.monotonic()
        prepare_world()
        try:
            run, ticket, fired = play(boundary)
            problems = check(run, ticket)
        except Exception as exc:
            fired, problems = False, [f"{type(exc).__name__}: {exc}"]
        yield Outcome(
            "customer", str(boundary), fired, not problems, problems, time.monotonic() - started
        )
