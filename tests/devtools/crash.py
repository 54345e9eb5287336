"""The crash sweep: kill a real worker at every boundary of a run, restart it, check the world.

For each case (NW-1's refund, NW-3's denied refund, LU-2's two gates) a clean
reference run is recorded first: the list of durable steps it executed, from
DBOS's own checkpoint table. Each schedule then kills the worker (SIGKILL, no
cleanup) at exactly one boundary —

- ``before_step:<name>:<n>`` — the n-th execution of a step is about to run
  (the previous checkpoint is written),
- ``after_step:<name>:<n>`` — it ran and committed its own writes, but DBOS has
  not checkpointed its output,
- ``after_effect:<tool>`` — an irreversible effect is written, not committed,
- ``after_commit:<tool>`` — it is committed, not checkpointed,
- ``after_claim:<tool>`` / ``after_provider:<tool>`` — for an effect in another system
  (the ``nw1-payments`` case: refunds at the payments double; ``nw1-shopify``: through
  Shopify's ``refundCreate`` at its double): the pending claim is
  committed and the provider not yet called / the provider made the refund and nothing
  here records it yet,
- ``parked:<n>`` — the run is waiting at its n-th gate: the worker dies, the
  decision is made while nothing runs, a new worker picks it up —

restarts a worker under the same executor id (DBOS recovers its workflows),
drives the run to the end and asserts: at most one effect per ledger key, the
expected effects exactly, refunds within every ceiling, exactly one terminal
state, and step-log accounting equal to the run's totals. For a case whose refunds go
to the payments double: exactly the expected refunds *at the double*, each recorded once
here (succeeded, with the double's id) and every ledger entry settled.

Over 400 lines because the sweep's schedule, its worker choreography and its checks of the
world after each kill are one procedure.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from collections.abc import Callable, Iterator

from django.db import close_old_connections, connection
from django.db.models import Count, Sum
from django.utils import timezone

from agent.models import TERMINAL_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from agent.models.payloads import StepKind
from agent.run.services import run_start
from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from deskhand.domain.desk.models import Merchant, Order, OutboundEmail, Refund, Ticket
from deskhand.domain.desk.services import merchant_day_start
from tests.devtools.crashworker import Worker
from tests.devtools.evals.harness import APPROVE, Decision, deny
from tests.devtools.evals.runner import reset_world
from tests.devtools.evals.scripts import NW3_DENIAL_REASON
from tests.support.payments_api import PaymentsApi, charge_seeded_orders
from tests.support.shopify_double import ShopifyDouble
from tests.support.shopify_world import northwind_on_shopify

STEP_PREFIXES = (
    "run.begin",
    "bounds.check",
    "model",
    "tool.",
    "ledger.lookup",
    "gate.",
    "notes.record",
    "run.finish",
)
IRREVERSIBLE = ("issue_refund", "send_customer_email", "cancel_order")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    ticket: str
    owner: str
    provider: str  # a script name in tests.devtools.evals.scripts
    decisions: tuple[Decision, ...]
    refunds: tuple[tuple[str, int], ...]  # (order, cents) the run must end with, exactly
    emails: int
    ticket_status: str
    refund_adapter: str = "database"  # "payments": the payments double; "shopify": Shopify's


CASES = {
    "nw1": Case(
        "nw1",
        "NW-1",
        "owner@northwind.test",
        "policy",
        (APPROVE,),
        (("NW-1042", 3800),),
        1,  # the reply that tells Dana what was refunded
        "resolved",
    ),
    "nw3": Case(
        "nw3",
        "NW-3",
        "owner@northwind.test",
        "nw3-asks",
        (deny(NW3_DENIAL_REASON),),
        (),
        0,
        "escalated",
    ),
    "nw1-payments": Case(
        "nw1-payments",
        "NW-1",
        "owner@northwind.test",
        "policy",
        (APPROVE,),
        (("NW-1042", 3800),),
        1,  # the reply that tells Dana what was refunded
        "resolved",
        refund_adapter="payments",
    ),
    "nw1-shopify": Case(
        "nw1-shopify",
        "NW-1",
        "owner@northwind.test",
        "policy",
        (APPROVE,),
        (("NW-1042", 3800),),
        1,
        "resolved",
        refund_adapter="shopify",
    ),
    "lu2": Case(
        "lu2",
        "LU-2",
        "owner@lumen.test",
        "policy",
        (APPROVE, APPROVE),
        (("LU-2311", 17900),),
        1,
        "resolved",
    ),
}


@dataclasses.dataclass(frozen=True)
class Boundary:
    point: str
    target: str
    nth: int = 1

    @property
    def spec(self) -> str:
        return "" if self.point == "parked" else f"{self.point}:{self.target}:{self.nth}"

    def __str__(self) -> str:
        return f"{self.point}:{self.target}:{self.nth}"

    @classmethod
    def parse(cls, text: str) -> Boundary:
        point, target, *rest = text.split(":")
        return cls(point, target, int(rest[0]) if rest else 1)


@dataclasses.dataclass
class Outcome:
    case: str
    boundary: str
    fired: bool
    ok: bool
    problems: list[str]
    seconds: float


# --- the world a schedule starts from ------------------------------------------------------

_double: dict[str, PaymentsApi] = {}


def payments_double() -> PaymentsApi:
    """The payments double of this process (started once); workers reach it through the env."""
    if "api" not in _double:
        api = _double["api"] = PaymentsApi().start()
        os.environ.update(api.env())
        os.environ.setdefault("DESKHAND_EFFECT_BUDGET_SECONDS", "8")
    return _double["api"]


def shopify_double() -> ShopifyDouble:
    """A fresh Shopify double for one schedule; workers (started after) reach it through the
    env, this process through its settings."""
    from django.conf import settings

    if "shop" in _shop:
        _shop.pop("shop").stop()
    shop = _shop["shop"] = ShopifyDouble().start()
    os.environ.update(shop.env())
    os.environ.setdefault("DESKHAND_EFFECT_BUDGET_SECONDS", "8")
    settings.DESKHAND_SHOPIFY_BASE_URL = shop.url
    return shop


_shop: dict[str, ShopifyDouble] = {}


def prepare_world(case: Case) -> None:
    """A freshly seeded world; for a payments case, Northwind refunding at a fresh double;
    for a Shopify case, Northwind's orders at a fresh Shopify double."""
    reset_world()
    if case.refund_adapter == "shopify":
        northwind_on_shopify(shopify_double())
    if case.refund_adapter == "payments":
        api = payments_double()
        api.reset()
        charge_seeded_orders(api)
        Merchant.objects.update(refund_adapter="payments")


# --- one schedule ----------------------------------------------------------------------


def _start_run(case: Case) -> Run:
    from django.contrib.auth import get_user_model

    ticket = Ticket.objects.get(reference=case.ticket)
    return run_start(ticket=ticket, user=get_user_model().objects.get(email=case.owner))


def _pending_reads(run_id: str) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM dbos.operation_outputs "
            "WHERE workflow_uuid = %s AND output LIKE %s"
            # The request says "pending" (Patch.TWO_STEP_GATE), a read or a resume that
            # found no decision yet says it again; older runs read it in gate.read steps.
            " AND function_name IN ('gate.request', 'gate.read', 'gate.resume')",
            [run_id, "%pending%"],
        )
        return int(cur.fetchone()[0])


def _pending(run: Run) -> Approval | None:
    return (
        Approval.objects.filter(run=run, status=ApprovalStatus.PENDING)
        .order_by("requested_at")
        .first()
    )


def play(case: Case, boundary: Boundary | None, *, timeout: float = 90.0) -> tuple[Run, bool, str]:
    """One run of ``case`` with the worker killed at ``boundary`` (None: a clean run).

    Returns the finished run, whether the kill happened, and the executor id used.
    """
    from django.contrib.auth import get_user_model

    executor_id = f"sweep-{case.name}-{secrets.token_hex(4)}"
    worker = Worker(executor_id, case.provider).start(boundary.spec if boundary else "")
    fired = False
    try:
        run = _start_run(case)
        decisions = list(case.decisions)
        gate = 0
        end = time.monotonic() + timeout
        while True:
            close_old_connections()
            run.refresh_from_db()
            if not worker.alive:
                fired = fired or worker.killed
                worker.start("")  # same executor id: DBOS recovers this executor's workflows
                continue
            # Done when the run says so *and* DBOS agrees (a kill after run.finish committed
            # leaves the workflow pending until a worker recovers it).
            if run.status in TERMINAL_STATUSES and workflow_status(str(run.pk)) in FINISHED:
                break
            if time.monotonic() > end:
                raise TimeoutError(f"run stayed {run.status} for {timeout:.0f}s")
            approval = _pending(run) if run.status == "awaiting_approval" else None
            # Decide only once the run has checkpointed reading "pending" at this gate, so every
            # schedule meets the same steps (read pending, wait, read the decision).
            if approval is not None and decisions and _pending_reads(str(run.pk)) > gate:
                gate += 1
                if boundary is not None and boundary.point == "parked" and boundary.nth == gate:
                    worker.kill()
                    fired = True
                decision = decisions.pop(0)
                approval_decide(
                    approval=approval,
                    user=get_user_model().objects.get(email=case.owner),
                    approve=bool(decision.approve),
                    reason=decision.reason,
                    channel="cli",
                )
                continue
            time.sleep(0.05)
        return run, fired, executor_id
    finally:
        worker.stop()


FINISHED = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


def workflow_status(run_id: str) -> str | None:
    with connection.cursor() as cur:
        cur.execute("SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", [run_id])
        row = cur.fetchone()
    return row[0] if row else None


def dbos_steps(run_id: str) -> list[str]:
    """The durable steps a run executed, in order, from DBOS's checkpoint table."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s ORDER BY function_id",
            [run_id],
        )
        return [name for (name,) in cur.fetchall() if name.startswith(STEP_PREFIXES)]


def boundaries(steps: list[str], gates: int, external: tuple[str, ...] = ()) -> list[Boundary]:
    """Every boundary of a reference run: around each step execution, each effect, each wait.

    ``external``: the irreversible tools whose effect is in another system here, which have
    two more boundaries (the claim committed; the other system acted).
    """
    out: list[Boundary] = []
    seen: dict[str, int] = {}
    for name in steps:
        seen[name] = seen.get(name, 0) + 1
        out.append(Boundary("before_step", name, seen[name]))
        if name.startswith("tool.") and name[5:] in external:
            out.append(Boundary("after_claim", name[5:], seen[name]))
            out.append(Boundary("after_provider", name[5:], seen[name]))
        if name.startswith("tool.") and name[5:] in IRREVERSIBLE:
            out.append(Boundary("after_effect", name[5:], seen[name]))
        out.append(Boundary("after_step", name, seen[name]))
        if name.startswith("tool.") and name[5:] in IRREVERSIBLE:
            out.append(Boundary("after_commit", name[5:], seen[name]))
    out += [Boundary("parked", "gate", n) for n in range(1, gates + 1)]
    return out


# --- what must hold afterwards ---------------------------------------------------------


def check(case: Case, run: Run) -> list[str]:
    run.refresh_from_db()
    problems: list[str] = []
    if run.status != "succeeded" or run.stop_reason != "end_turn":
        problems.append(f"ended {run.status}/{run.stop_reason}: {run.stop_detail[:200]}")
    steps = Step.objects.filter(run=run)
    ends = steps.filter(kind__in=(StepKind.FINAL, StepKind.BOUND, StepKind.ERROR)).count()
    if ends != 1:
        problems.append(f"{ends} terminal steps")
    if (status := workflow_status(str(run.pk))) != "SUCCESS":
        problems.append(f"DBOS says the workflow is {status}")
    # At most one effect per ledger key, and exactly the effects the case calls for.
    keys = LedgerEntry.objects.values("key").annotate(n=Count("id")).filter(n__gt=1)
    if keys:
        problems.append(f"ledger keys claimed twice: {list(keys)}")
    for entry in LedgerEntry.objects.all():
        effects = (
            Refund.objects.filter(ledger_entry=entry).count()
            + OutboundEmail.objects.filter(ledger_entry=entry).count()
        )
        effects += Order.objects.filter(cancel_ledger_entry=entry).count()
        if effects > 1 or (entry.ok and effects != 1):
            problems.append(f"ledger {entry.key} ({entry.tool}) has {effects} effects")
        if entry.ok and (
            entry.approval is None
            or entry.approval.status != "approved"
            or entry.approval.args_hash != entry.args_hash
        ):
            problems.append(f"ledger {entry.key} executed without a matching approval")
    refunds = tuple(
        sorted((r.order.reference, r.amount_cents) for r in Refund.objects.select_related("order"))
    )
    if refunds != tuple(sorted(case.refunds)):
        problems.append(f"refunds {refunds}, expected {case.refunds}")
    if OutboundEmail.objects.count() != case.emails:
        problems.append(f"{OutboundEmail.objects.count()} emails, expected {case.emails}")
    # Every ceiling.
    for order in Order.objects.all():
        total = int(order.refunds.aggregate(t=Sum("amount_cents"))["t"] or 0)
        if total > order.total_cents:
            problems.append(f"{order.reference} refunded {total} of {order.total_cents}")
    by_run = int(Refund.objects.filter(run=run).aggregate(t=Sum("amount_cents"))["t"] or 0)
    if by_run > run.max_refund_cents:
        problems.append(f"run refunded {by_run}, its ceiling is {run.max_refund_cents}")
    for merchant in Merchant.objects.all():
        today = Refund.objects.filter(
            merchant=merchant, created_at__gte=merchant_day_start(merchant)
        )
        if (
            int(today.aggregate(t=Sum("amount_cents"))["t"] or 0)
            > merchant.daily_refund_ceiling_cents
        ):
            problems.append(f"{merchant.slug} passed its daily refund ceiling")
    # The step log adds up (a model call retried after a crash is added, never overwritten).
    sums = steps.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_micros"))
    if (run.steps, run.input_tokens, run.output_tokens, run.cost_micros) != (
        steps.count(),
        sums["i"] or 0,
        sums["o"] or 0,
        sums["c"] or 0,
    ):
        problems.append("run totals differ from the step log")
    seqs = list(steps.order_by("seq").values_list("seq", flat=True))
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"step seqs not dense: {seqs}")
    status = Ticket.objects.get(reference=case.ticket).status
    if status != case.ticket_status:
        problems.append(f"{case.ticket} is {status}, expected {case.ticket_status}")
    if case.refund_adapter == "payments":
        problems += check_provider(case)
    if case.refund_adapter == "shopify":
        problems += check_shopify(case)
    return problems


def check_shopify(case: Case) -> list[str]:
    """Exactly the case's refunds at the Shopify double, each recorded here once with its id,
    nothing pending, and reconciliation at Shopify finding no difference."""
    from agent.ledger.provider_reconciliation import reconcile_merchant
    from agent.models import EffectFinding

    problems: list[str] = []
    shop = _shop["shop"]
    made = [(o.name, r.amount, r.gid) for o in shop.orders.values() for r in o.refunds]
    if tuple(sorted((n, a) for n, a, _ in made)) != tuple(sorted(case.refunds)):
        problems.append(f"refunds at Shopify {made}, expected {case.refunds}")
    ids = {gid for _, _, gid in made}
    for refund in Refund.objects.all():
        if refund.status != "succeeded" or refund.provider_refund_id not in ids:
            problems.append(
                f"refund {refund.pk} is {refund.status} with Shopify id {refund.provider_refund_id!r}"
            )
    for entry in LedgerEntry.objects.filter(state="pending"):
        problems.append(f"ledger {entry.key} is still pending")
    merchant = Merchant.objects.get(slug="northwind")
    reconcile_merchant(merchant.pk, now=timezone.now())
    problems += [f"reconciliation: {f.kind} {f.detail}" for f in EffectFinding.objects.all()]
    return problems


def check_provider(case: Case) -> list[str]:
    """Exactly the case's refunds at the double; each recorded here once, settled, with its id."""
    problems: list[str] = []
    made = payments_double().refunds
    orders = dict(
        Order.objects.exclude(payment_reference="").values_list("payment_reference", "reference")
    )
    # A refund names its payment intent (the seeded orders' references) and its charge.
    paid = [(r["payment_intent"] or r["charge"], r["amount"]) for r in made]
    at_provider = tuple(sorted((orders.get(p, p), amount) for p, amount in paid))
    if at_provider != tuple(sorted(case.refunds)):
        problems.append(f"refunds at the provider {at_provider}, expected {case.refunds}")
    ids = {r["id"] for r in made}
    for refund in Refund.objects.all():
        if refund.status != "succeeded" or refund.provider_refund_id not in ids:
            problems.append(
                f"refund {refund.pk} is {refund.status} with provider id {refund.provider_refund_id!r}"
            )
    for entry in LedgerEntry.objects.filter(state="pending"):
        problems.append(f"ledger {entry.key} is still pending")
    return problems


# --- the sweep -----------------------------------------------------------------------------


def reference(case: Case) -> list[Boundary]:
    """Play ``case`` once without a crash and list its boundaries."""
    prepare_world(case)
    run, _, _ = play(case, None)
    problems = check(case, run)
    if problems:
        raise AssertionError(f"{case.name}: the reference run itself is wrong: {problems}")
    external = ("issue_refund",) if case.refund_adapter in ("payments", "shopify") else ()
    return boundaries(dbos_steps(str(run.pk)), len(case.decisions), external)


def sweep(
    case: Case, points: list[Boundary], on_outcome: Callable[[Outcome], None] | None = None
) -> Iterator[Outcome]:
    for boundary in points:
        started = time.monotonic()
        prepare_world(case)
        try:
            run, fired, _ = play(case, boundary)
            problems = check(case, run)
        except Exception as exc:  # a schedule that breaks is a failed schedule, with its reason
            fired, problems = False, [f"{type(exc).__name__}: {exc}"]
        outcome = Outcome(
            case.name, str(boundary), fired, not problems, problems, time.monotonic() - started
        )
        if on_outcome is not None:
            on_outcome(outcome)
        yield outcome


# The boundaries that matter most, for CI: money committed but not checkpointed, an effect
# torn mid-transaction, a model call paid but not checkpointed, a wait across a dead worker.
CI_SCHEDULES = {
    "nw1": [
        "after_step:tool.issue_refund",
        "after_effect:issue_refund",
        "after_step:model:2",
        "parked:gate:1",
    ],
    "lu2": ["after_commit:send_customer_email", "before_step:tool.issue_refund"],
    # Refunds at the payments double: killed with the claim committed and nothing sent; with
    # the refund made there and nothing recorded here; and after the record, before DBOS knew.
    "nw1-payments": [
        "after_claim:issue_refund",
        "after_provider:issue_refund",
        "after_step:tool.issue_refund",
    ],
    "nw3": ["after_step:gate.resume", "parked:gate:1"],
    # Refunds through Shopify's refundCreate: killed with the claim committed and nothing sent,
    # and with the refund made at Shopify and nothing recorded here (the same key again).
    "nw1-shopify": ["after_claim:issue_refund", "after_provider:issue_refund"],
}
