"""The crash sweep's intake case: "mail arrives → stored → enqueued → threaded → routed → run".

A burst of new customers writes to Northwind (which opens a run on every customer message),
from a few concurrent sending threads that behave like the sender they stand for: over real
SMTP, a mail server sends again a message that got no 250; over real HTTP, Mailgun and a
help desk post again whatever got no 2xx (a dropped connection or a 5xx), to the same port
once the process is back. One process is SIGKILLed at one boundary:

- **the receiver** (``manage.py mail_receiver`` under ``tests/devtools/crashreceiver.py``),
  as a message is committed and not yet handed to its workflow (``after_store:inbound``) or
  handed on and its sender not yet answered (``after_enqueue:inbound``). It is started again
  on the same port. The ``gives-up/`` variant's sender never sends again: only the worker's
  sweep (``agent.customer.intake``) can find the row it left ``received``;
- **the worker**, around threading (``before_step:`` / ``after_step:mail.process``) and
  routing (``after_step:customer.route``; ``after_commit:customer.route``: the run opened and
  committed, not yet handed to DBOS). It is started again under the same executor id;
- **the web process taking Mailgun's webhook** (``mailgun/…``: ``manage.py web`` under
  ``tests/devtools/crashweb.py``), at the same two boundaries of ``inbound_received``, ten
  signed posts to ``/inbound/mailgun/`` and ``/inbound/mailgun/mime``. It is started again on
  the same port;
- **the web process taking the help-desk webhook** (``helpdesk/after_store:customer_line``):
  new tickets posted, signed, to ``/api/v1/helpdesk/northwind/zendesk``; it dies with a line
  committed and its routing workflow not yet enqueued. The desk's re-post is a duplicate
  (200, the same ticket) and enqueues nothing: only the worker's sweep routes that line;
- **the worker, for the help-desk webhook** (``helpdesk/…`` at ``customer.route``): each line
  is routed by ``deskhand.customer_line`` on the worker, killed as it routes.

Afterwards, within a deadline: every message that got a 250 (a 200) is one stored row,
threaded, one line on a thread (a re-sent one too: the Message-ID dedupes it); every stored
row is threaded, whoever was told; every help-desk delivery taken is one line, on its own
ticket, the one its answer named; no line is left pending; every line opened exactly one
run, the one named after it (``line_run_id``), and that run has started. ``manage.py
crash_sweep --case intake`` runs every schedule; ``tests/durability/test_crash_sweep.py``
runs the CI ones (``CI_MAIL``, ``CI_HELPDESK``, ``CI_WEB``).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from django.db import close_old_connections

from agent.customer.route import line_run_id
from agent.models import Run
from deskhand.domain.desk.models import Merchant, Routing, TicketMessage
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from deskhand.infra.dbos import client as dbos_client
from tests.devtools.crash import Boundary, Outcome, workflow_status
from tests.devtools.crashreceiver import Letter, Mta, Receiver
from tests.devtools.crashweb import Delivery, Sender, Web
from tests.devtools.crashworker import Worker
from tests.devtools.evals.runner import reset_world
from tests.mail.conftest import NORTHWIND, free_port, mail

BURST = 12  # new customers writing at once, by SMTP
MAILGUN_BURST = 10  # … through Mailgun's webhook
HELPDESK_TICKETS = 4
HELPDESK_URL = "/api/v1/helpdesk/northwind/zendesk"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How the mail comes and where to kill: ``channel`` is ``smtp``, ``mailgun`` or
    ``helpdesk``; ``resend`` is False when the sender gives up. The boundary says which
    process dies (``side``)."""

    channel: str
    boundary: Boundary
    resend: bool = True

    @property
    def side(self) -> str:
        """``receiver``, ``web`` or ``worker``: the process that reaches the boundary."""
        if self.boundary.target in ("inbound", "customer_line"):
            return "receiver" if self.channel == "smtp" else "web"
        return "worker"

    @property
    def spec(self) -> str:
        """The crash point, as the launchers read it."""
        return f"{self.boundary.point}:{self.boundary.target}:{self.boundary.nth}"

    def __str__(self) -> str:
        if self.channel == "smtp":
            return f"{'' if self.resend else 'gives-up/'}{self.boundary}"
        return f"{self.channel}/{self.boundary}"

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """``after_store:inbound:5``, ``gives-up/after_store:inbound:5``,
        ``after_step:mail.process:4``, ``mailgun/after_enqueue:inbound:5``,
        ``helpdesk/after_store:customer_line:2``, ``helpdesk/after_commit:customer.route:2``."""
        prefix, _, rest = text.rpartition("/")
        boundary = Boundary.parse(rest)
        if prefix in ("mailgun", "helpdesk"):
            return cls(prefix, boundary)
        if prefix not in ("", "gives-up"):
            raise ValueError(f"{prefix!r}: a schedule is plain, gives-up/, mailgun/ or helpdesk/")
        return cls("smtp", boundary, resend=prefix != "gives-up")


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
        "mailgun/after_store:inbound:1",
        "mailgun/after_store:inbound:5",
        "mailgun/after_store:inbound:10",
        "mailgun/after_enqueue:inbound:1",
        "mailgun/after_enqueue:inbound:5",
        "mailgun/after_enqueue:inbound:10",
        "helpdesk/after_store:customer_line:1",
        "helpdesk/after_store:customer_line:2",
        "helpdesk/after_store:customer_line:4",
        "helpdesk/after_step:customer.route:2",
        "helpdesk/after_commit:customer.route:2",
    )
)
# For CI: a row stored and never handed on; a line routed and not checkpointed; a run
# opened and committed and not yet handed to DBOS.
CI_MAIL = ("after_store:inbound:5", "after_step:customer.route:4", "after_commit:customer.route:4")
CI_HELPDESK = ("helpdesk/after_step:customer.route:2", "helpdesk/after_commit:customer.route:2")
# The web process killed with a Mailgun message committed and not handed on, and with a
# help-desk line committed and not handed on (the desk's re-post is a duplicate: only the
# sweep routes it).
CI_WEB = ("mailgun/after_store:inbound:5", "helpdesk/after_store:customer_line:2")


def prepare_world() -> None:
    """A freshly seeded world where Northwind opens a run on every customer message."""
    reset_world()
    Merchant.objects.filter(slug="northwind").update(auto_runs="every_message")


# --- the sending side --------------------------------------------------------------------


def burst(tag: str, size: int = BURST) -> list[Letter]:
    letters = []
    for n in range(1, size + 1):
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


def mailgun_burst(tag: str) -> list[Delivery]:
    """The burst as Mailgun forwards it, half as raw MIME and half as parsed fields."""
    return [
        Delivery.mailgun(letter, parsed=n % 2 == 0)
        for n, letter in enumerate(burst(tag, MAILGUN_BURST), 1)
    ]


def helpdesk_deliveries(tag: str) -> list[Delivery]:
    """New tickets from new customers, signed under a new help-desk source's secret."""
    from deskhand.domain.apikeys.helpdesk import source_create
    from tests.api.test_helpdesk import new_ticket
    from tests.console.conftest import NW_OWNER, user

    _, secret = source_create(
        merchant=Merchant.objects.get(slug="northwind"), user=user(NW_OWNER), slug="zendesk"
    )
    return [
        Delivery.helpdesk(
            HELPDESK_URL,
            secret,
            {
                **new_ticket(f"ZD-{tag}-{n}"),
                "customer": {"email": f"desk{n}.{tag}@example.net", "name": f"Desk {n}"},
            },
        )
        for n in range(1, HELPDESK_TICKETS + 1)
    ]


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
    worker: Worker, front: Receiver | Web, sent: Callable[[], bool], timeout: float
) -> bool:
    """Restart whatever dies until the world settles (or the deadline: ``check`` then says
    what is left); whether the kill happened.

    While waiting it nudges the workers' queues (as ``bench --inbound`` does): the intake
    queue takes one message per merchant at a time, and without a nudge each next one waits
    for the queue's fallback poll (``DESKHAND_QUEUE_POLL_SEC``, 5 s), which would make a
    burst of twelve a minute long and prove nothing more. The reconciler's sweep, which is
    what finds a row left ``received`` or a line left pending, runs on its own timer either
    way.
    """
    fired = False
    end = time.monotonic() + timeout
    nudged = 0.0
    while time.monotonic() < end:
        if not front.alive:
            fired = fired or front.killed
            front.start("")  # the same port: the sender retries there
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
    receiver = Receiver(f"sweep-intake-{tag}", free_port())
    letters = burst(tag)
    mta = Mta(receiver.port, NORTHWIND, letters, resend=schedule.resend)
    fired = _play(schedule, f"sweep-intake-{tag}", receiver, mta, timeout)
    return letters, fired


def play_mailgun(schedule: Schedule, *, timeout: float = 90.0) -> tuple[list[Delivery], bool]:
    """A burst of Mailgun's posts with one process killed at ``schedule``: the deliveries
    (what Mailgun was told) and whether the kill happened."""
    tag = secrets.token_hex(4)
    web = Web(f"sweep-mailgun-{tag}", free_port())
    deliveries = mailgun_burst(tag)
    fired = _play(schedule, f"sweep-mailgun-{tag}", web, Sender(web.port, deliveries), timeout)
    return deliveries, fired


def play_helpdesk(schedule: Schedule, *, timeout: float = 90.0) -> tuple[list[Delivery], bool]:
    """New tickets posted to the help-desk webhook while the web process dies storing one or
    the worker routing one: the deliveries (what the desk was told) and whether the kill
    happened."""
    tag = secrets.token_hex(4)
    web = Web(f"sweep-helpdesk-{tag}", free_port())
    deliveries = helpdesk_deliveries(tag)
    fired = _play(schedule, f"sweep-helpdesk-{tag}", web, Sender(web.port, deliveries), timeout)
    return deliveries, fired


def _play(
    schedule: Schedule,
    executor_id: str,
    front: Receiver | Web,
    sender: Mta | Sender,
    timeout: float,
) -> bool:
    """The receiving process and a worker, one of them set to die; the sender sending."""
    worker = Worker(executor_id, "")
    try:
        front.start(schedule.spec if schedule.side != "worker" else "")
        worker.start(schedule.spec if schedule.side == "worker" else "")
        sender.start()
        return _babysit(worker, front, lambda: sender.done, timeout)
    finally:
        sender.stop()
        worker.stop()
        front.stop()


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


def check(letters: Sequence[Letter | Delivery], schedule: Schedule) -> list[str]:
    """What is wrong after a burst of mail (empty: nothing), by SMTP (letters) or through
    Mailgun (deliveries). A sender that re-sends must have had every message taken in the
    end; one that gave up may have left a message stored or not, and at least one stored
    and unanswered (else the schedule proved nothing of the sweep)."""
    close_old_connections()
    problems: list[str] = []
    stored_unanswered = 0
    for n, letter in enumerate(letters, 1):
        what = f"message {n} ({letter.attempts} sends, last {letter.answer})"
        rows = list(InboundEmail.objects.filter(message_id=letter.message_id))
        if letter.accepted and not rows:
            problems.append(f"{what}: was taken (250/200) and is not stored (lost)")
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
    if schedule.side != "worker" and schedule.resend and not any(x.resent for x in letters):
        problems.append("no message was sent twice: the kill dropped no conversation")
    if not schedule.resend and not stored_unanswered:
        problems.append("no stored message went unanswered: nothing was left for the sweep")
    return problems + _loose_ends()


def check_helpdesk(deliveries: Sequence[Delivery], schedule: Schedule) -> list[str]:
    """What is wrong after the help desk's posts (empty: nothing): each one taken, one line
    on its own ticket (a re-post answered with the same ticket and line), routed to one run."""
    close_old_connections()
    problems: list[str] = []
    tickets = set()
    for n, delivery in enumerate(deliveries, 1):
        what = f"delivery {n} ({delivery.attempts} posts, last {delivery.answer})"
        if not delivery.accepted:
            problems.append(f"{what}: never taken")
        lines = list(TicketMessage.objects.filter(message_id=delivery.message_id))
        if len(lines) != 1:
            problems.append(f"{what}: {len(lines)} lines, not 1")
            continue
        line = lines[0]
        tickets.add(line.ticket_id)
        told = delivery.reply or {}
        if delivery.accepted and (told.get("message"), told.get("ticket")) != (
            line.pk,
            line.ticket.reference,
        ):
            problems.append(f"{what}: answered {told}, its line is {line.pk} on {line.ticket}")
        problems += _line_problems(line, what)
    if len(tickets) != len(deliveries):
        problems.append(f"{len(deliveries)} new tickets at the desk made {len(tickets)} here")
    # The web process dies after a line's commit: the desk's re-post of it is a duplicate.
    if schedule.side == "web" and not any((d.reply or {}).get("duplicate") for d in deliveries):
        problems.append("no re-post was a duplicate: the kill left no stored line unanswered")
    return problems + _loose_ends()


# --- the sweep -----------------------------------------------------------------------------


def play_and_check(schedule: Schedule) -> tuple[bool, list[str]]:
    """Fire ``schedule`` in a fresh world: (whether the kill happened, what is wrong)."""
    prepare_world()
    if schedule.channel == "helpdesk":
        deliveries, fired = play_helpdesk(schedule)
        return fired, check_helpdesk(deliveries, schedule)
    if schedule.channel == "mailgun":
        posts, fired = play_mailgun(schedule)
        return fired, check(posts, schedule)
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
