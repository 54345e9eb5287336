"""The crash sweep's intake case: "mail arrives → stored → enqueued → threaded → routed → run".

A burst of twelve new customers writes to Northwind (which opens a run on every customer
message) over real SMTP, from a few concurrent sending threads that behave like a mail
server: a message that got no 250 is sent again, to the receiver once it is back. One
process is SIGKILLed at one boundary:

- **the receiver** (``manage.py mail_receiver`` under ``tests/devtools/crashreceiver.py``),
  as a message is committed and not yet handed to its workflow (``after_store:inbound``) or
  handed on and its sender not yet answered (``after_enqueue:inbound``). It is started again
  on the same port. The ``gives-up/`` variant's sender never sends again: only the worker's
  sweep (``agent.customer.intake``) can find the row it left ``received``;
- **the worker**, around threading (``before_step:`` / ``after_step:mail.process``) and
  routing (``after_step:customer.route``; ``after_commit:customer.route``: the run opened and
  committed, not yet handed to DBOS). It is started again under the same executor id;
- **the worker, for the help-desk webhook** (``helpdesk/…``): new tickets posted, signed, to
  ``/api/v1/helpdesk/northwind/zendesk`` in this process; each line is routed by
  ``deskhand.customer_line`` on the worker, killed as it routes.

Afterwards, within a deadline: every message that got a 250 is one stored row, threaded,
one line on a thread (a re-sent one too: the Message-ID dedupes it); every stored row is
threaded, whoever was told; no line is left pending; every line opened exactly one run, the
one named after it (``line_run_id``), and that run has started. ``manage.py crash_sweep
--case intake`` runs every schedule; ``tests/bounds/test_crash_sweep.py`` runs three in CI
and ``tests/mail/test_intake_crashes.py`` the help-desk ones.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterable, Iterator

from django.db import close_old_connections

from agent.customer.route import line_run_id
from agent.models import Run
from deskhand.dbos import client as dbos_client
from deskhand.desk.models import Merchant, Routing, TicketMessage
from deskhand.mail.models import InboundEmail, InboundStatus
from tests.devtools.crash import Boundary, Outcome, workflow_status
from tests.devtools.crashreceiver import Letter, Mta, Receiver
from tests.devtools.crashworker import Worker
from tests.devtools.evals.runner import reset_world
from tests.mail.conftest import NORTHWIND, free_port, mail

BURST = 12  # new customers writing at once
HELPDESK_TICKETS = 4


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Whom to kill where: ``side`` is ``receiver``, ``worker`` or ``helpdesk`` (the worker,
    for lines from the help-desk webhook); ``resend`` is False when the sender gives up."""

    side: str
    boundary: Boundary
    resend: bool = True

    @property
    def spec(self) -> str:
        """The crash point, as the launchers read it."""
        return f"{self.boundary.point}:{self.boundary.target}:{self.boundary.nth}"

    def __str__(self) -> str:
        prefix = {"helpdesk": "helpdesk/"}.get(self.side, "" if self.resend else "gives-up/")
        return f"{prefix}{self.boundary}"

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """``after_store:inbound:5``, ``gives-up/after_store:inbound:5``,
        ``after_step:mail.process:4``, ``helpdesk/after_commit:customer.route:2``."""
        prefix, _, rest = text.rpartition("/")
        boundary = Boundary.parse(rest)
        if prefix == "helpdesk":
            return cls("helpdesk", boundary)
        side = "receiver" if boundary.target == "inbound" else "worker"
        return cls(side, boundary, resend=prefix != "gives-up")


SCHEDULES = tuple(
    Schedule.parse(s)
    for s in (
        "after_store:inbound:1",
        "after_store:inbound:5",
        "after_store:inbound:12",
        "after_enqueue:inbound:1",
        "after_enqueue:inbound:5",
        "after_enqueue:inbound:12",
        "gives-up/after_store:inbound:5",
        "before_step:mail.process:4",
        "after_step:mail.process:4",
        "after_step:customer.route:4",
        "after_commit:customer.route:4",
        "after_commit:customer.route:12",
        "helpdesk/after_step:customer.route:2",
        "helpdesk/after_commit:customer.route:2",
    )
)
# For CI: a row stored and never handed on; a line routed and not checkpointed; a run
# opened and committed and not yet handed to DBOS.
CI_MAIL = ("after_store:inbound:5", "after_step:customer.route:4", "after_commit:customer.route:4")
CI_HELPDESK = ("helpdesk/after_step:customer.route:2", "helpdesk/after_commit:customer.route:2")


def prepare_world() -> None:
    """A freshly seeded world where Northwind opens a run on every customer message."""
    reset_world()
    Merchant.objects.filter(slug="northwind").update(auto_runs="every_message")


# --- the sending side --------------------------------------------------------------------


def burst(tag: str) -> list[Letter]:
    letters = []
    for n in range(1, BURST + 1):
        sender = f"customer{n}.{tag}@example.net"
        message_id = f"<intake-{tag}-{n}@mail.example.net>"
        raw = mail(
            sender=f"Customer {n} <{sender}>",
            subject=f"Order question {n}",
            message_id=message_id,
            body=f"Hello, this is customer {n}. My order has not arrived yet. Where is it?",
        )
        letters.append(Letter(sender, message_id, raw))
    return letters


# --- one schedule --------------------------------------------------------------------------


def _loose_ends() -> list[str]:
    """A stored message not processed, a line not routed, an opened run never started."""
    close_old_connections()
    waiting = InboundEmail.objects.filter(status=InboundStatus.RECEIVED).count()
    pending = TicketMessage.objects.filter(routing=Routing.PENDING).count()
    queued = Run.objects.filter(status="queued").count()
    if waiting or pending or queued:
        return [
            f"{waiting} stored messages unprocessed, {pending} lines unrouted, "
            f"{queued} runs never started"
        ]
    return []


def _babysit(
    worker: Worker, receiver: Receiver | None, sent: Callable[[], bool], timeout: float
) -> bool:
    """Restart whatever dies until the world settles (or the deadline: ``check`` then says
    what is left); whether the kill happened.

    While waiting it nudges the workers' queues (as ``bench --inbound`` does): the intake
    queue takes one message per merchant at a time, and without a nudge each next one waits
    for the queue's fallback poll (``DESKHAND_QUEUE_POLL_SEC``, 5 s), which would make a
    burst of twelve a minute long and prove nothing more. The reconciler's sweep, which is
    what finds a row left ``received``, runs on its own timer either way.
    """
    fired = False
    end = time.monotonic() + timeout
    nudged = 0.0
    while time.monotonic() < end:
        if receiver is not None and not receiver.alive:
            fired = fired or receiver.killed
            receiver.start("")  # the same port: the sending server retries there
            continue
        if not worker.alive:
            fired = fired or worker.killed
            worker.start("")  # the same executor id: DBOS recovers this executor's workflows
            continue
        if sent() and not _loose_ends():
            break
        if time.monotonic() - nudged > 0.2:
            dbos_client.notify_queue()
            nudged = time.monotonic()
        time.sleep(0.05)
    return fired


def play(schedule: Schedule, *, timeout: float = 90.0) -> tuple[list[Letter], bool]:
    """A burst of mail with one process killed at ``schedule``: the letters (what each
    sender was told) and whether the kill happened."""
    tag = secrets.token_hex(4)
    executor_id = f"sweep-intake-{tag}"
    receiver = Receiver(executor_id, free_port())
    worker = Worker(executor_id, "")
    letters = burst(tag)
    mta = Mta(receiver.port, NORTHWIND, letters, resend=schedule.resend)
    try:
        receiver.start(schedule.spec if schedule.side == "receiver" else "")
        worker.start(schedule.spec if schedule.side == "worker" else "")
        mta.start()
        fired = _babysit(worker, receiver, lambda: mta.done, timeout)
        return letters, fired
    finally:
        mta.stop()
        worker.stop()
        receiver.stop()


def _line_problems(line: TicketMessage, what: str) -> list[str]:
    """One line opened one run, the one named after it, and that run started."""
    problems = []
    runs = list(Run.objects.filter(ticket_id=line.ticket_id).values_list("pk", "status"))
    if line.routing != Routing.OPENED:
        problems.append(f"{what}: routed {line.routing!r} ({line.routing_detail}), not opened")
    if len(runs) != 1:
        problems.append(f"{what}: {len(runs)} runs on its ticket, not 1")
    expected = line_run_id(line.pk)
    if line.routed_run_id != expected or (runs and runs[0][0] != expected):
        problems.append(f"{what}: run {line.routed_run_id}, not {expected} (line_run_id)")
    for pk, status in runs:
        if status == "queued" or workflow_status(str(pk)) is None:
            problems.append(f"{what}: run {pk} never started ({status}, no workflow)")
    return problems


def check(letters: list[Letter], schedule: Schedule) -> list[str]:
    """What is wrong after a burst (empty: nothing). A sender that re-sends must have had
    every message taken in the end; one that gave up may have left a message stored or not,
    and at least one stored and unanswered (else the schedule proved nothing of the sweep)."""
    close_old_connections()
    problems: list[str] = []
    stored_unanswered = 0
    for n, letter in enumerate(letters, 1):
        what = f"message {n} ({letter.attempts} sends, last {letter.answer})"
        rows = list(InboundEmail.objects.filter(message_id=letter.message_id))
        if letter.accepted and not rows:
            problems.append(f"{what}: got a 250 and is not stored (lost)")
        if len(rows) > 1:
            problems.append(f"{what}: stored {len(rows)} times")
        if schedule.resend and not letter.accepted:
            problems.append(f"{what}: never taken")
        if letter.answer[:1] == "5":
            problems.append(f"{what}: refused")
        if not rows:
            continue
        stored_unanswered += not letter.accepted
        if rows[0].status != InboundStatus.THREADED or rows[0].thread_message_id is None:
            problems.append(f"{what}: stored, and {rows[0].status} ({rows[0].reason})")
        lines = list(TicketMessage.objects.filter(message_id=letter.message_id))
        if len(lines) != 1:
            problems.append(f"{what}: {len(lines)} lines on threads, not 1")
            continue
        problems += _line_problems(lines[0], what)
    if schedule.side == "receiver" and schedule.resend and not any(x.resent for x in letters):
        problems.append("no message was sent twice: the kill dropped no conversation")
    if not schedule.resend and not stored_unanswered:
        problems.append("no stored message went unanswered: nothing was left for the sweep")
    return problems + _loose_ends()


# --- the help-desk webhook --------------------------------------------------------------------


def play_helpdesk(schedule: Schedule, *, timeout: float = 90.0) -> tuple[list[int], bool]:
    """New tickets posted to the help-desk webhook while the worker dies routing one: the
    lines stored, and whether the kill happened."""
    from django.test import Client

    from deskhand.apikeys.helpdesk import source_create
    from tests.api.test_helpdesk import URL, new_ticket, signed
    from tests.console.conftest import NW_OWNER, user

    tag = secrets.token_hex(4)
    _, secret = source_create(
        merchant=Merchant.objects.get(slug="northwind"), user=user(NW_OWNER), slug="zendesk"
    )
    worker = Worker(f"sweep-helpdesk-{tag}", "")
    try:
        worker.start(schedule.spec)
        lines = []
        for n in range(1, HELPDESK_TICKETS + 1):
            payload = {
                **new_ticket(f"ZD-{tag}-{n}"),
                "customer": {"email": f"desk{n}.{tag}@example.net", "name": f"Desk {n}"},
            }
            answer = Client().post(URL, **signed(secret, payload))
            if answer.status_code != 201:
                raise AssertionError(
                    f"delivery {n} answered {answer.status_code}: {answer.content!r}"
                )
            lines.append(int(answer.json()["message"]))
        fired = _babysit(worker, None, lambda: True, timeout)
        return lines, fired
    finally:
        worker.stop()


def check_helpdesk(lines: list[int]) -> list[str]:
    close_old_connections()
    problems: list[str] = []
    for n, pk in enumerate(lines, 1):
        line = TicketMessage.objects.filter(pk=pk).first()
        if line is None:
            problems.append(f"delivery {n}: its line is gone")
            continue
        problems += _line_problems(line, f"delivery {n}")
    return problems + _loose_ends()


# --- the sweep -----------------------------------------------------------------------------


def play_and_check(schedule: Schedule) -> tuple[bool, list[str]]:
    """Fire ``schedule`` in a fresh world: (whether the kill happened, what is wrong)."""
    prepare_world()
    if schedule.side == "helpdesk":
        lines, fired = play_helpdesk(schedule)
        return fired, check_helpdesk(lines)
    letters, fired = play(schedule)
    return fired, check(letters, schedule)


def sweep(schedules: Iterable[Schedule] = SCHEDULES) -> Iterator[Outcome]:
    """Each schedule in turn, from a fresh world; one that breaks fails with its reason."""
    for schedule in schedules:
        started = time.monotonic()
        try:
            fired, problems = play_and_check(schedule)
        except Exception as exc:
            fired, problems = False, [f"{type(exc).__name__}: {exc}"]
        yield Outcome(
            "intake", str(schedule), fired, not problems, problems, time.monotonic() - started
        )
