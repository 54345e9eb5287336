"""What a scenario works with: the seeded world, real runs on a real DBOS executor, decisions.

A scenario starts runs the way the product does (``run_create`` then
``run_enqueue``: a DBOS queue, the in-process executor picks it up), gives
decisions the way a person does (``approval_decide``), and reads the result as
a ``Trajectory``. The only test plumbing is the provider override (a script,
or the policy reader, wrapped in a ``Recorder`` so the scenario can see what
the model was shown) and, where a scenario asks for one, a fault.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any, Protocol

from django.contrib.auth import get_user_model
from django.db import close_old_connections
from django.utils import timezone

from agent.models import TERMINAL_STATUSES, Run, RunStatus
from agent.models.payloads import StepKind
from agent.providers import install_override
from agent.providers.base import ModelReply, Provider
from agent.providers.policy import PolicyProvider
from agent.record.steplog import log_step
from agent.run.services import run_create, run_enqueue
from agent.steps import EndPayload, ModelPayload
from agent.tools.narrowing import approval_approve_with_changes
from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from deskhand.domain.desk.models import Membership, Merchant, Order, Refund, Ticket
from tests.devtools.evals.trajectory import Trajectory
from tests.support.workflows import until_settled

WAIT_SECONDS = 30.0


class EvalFailure(AssertionError):
    """A scenario's claim did not hold; the message says what was seen instead."""


def expect(condition: Any, message: str) -> None:
    if not condition:
        raise EvalFailure(message)


def expect_eq(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise EvalFailure(f"{what}: expected {expected!r}, got {actual!r}")


class Executor(Protocol):
    """The in-process DBOS executor a scenario runs on; relaunching it under the same id recovers."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def restart(self) -> None: ...


class Recorder:
    """Wraps a provider and keeps every (system, messages) it was called with."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.calls: list[dict[str, Any]] = []

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        self.calls.append({"system": system, "messages": copy.deepcopy(messages)})
        return self.inner.complete(system=system, messages=messages, tools=tools)


@dataclasses.dataclass(frozen=True)
class Decision:
    approve: bool | None  # None: leave the approval pending
    reason: str = ""
    by: str | None = None
    # Approve with changes: the narrower arguments a person approves instead.
    changes: dict[str, Any] | None = None


APPROVE = Decision(True)
LEAVE = Decision(None)


def deny(reason: str) -> Decision:
    return Decision(False, reason)


def approve_with(**changes: Any) -> Decision:
    return Decision(True, changes=changes)


OWNERS = {"northwind": "owner@northwind.test", "lumen": "owner@lumen.test"}


class Harness:
    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.recorders: dict[str, Recorder] = {}

    # --- the world ---------------------------------------------------------------

    @staticmethod
    def ticket(reference: str) -> Ticket:
        return Ticket.objects.select_related("merchant", "customer").get(reference=reference)

    @staticmethod
    def order(reference: str) -> Order:
        return Order.objects.get(reference=reference)

    @staticmethod
    def merchant(slug: str) -> Merchant:
        return Merchant.objects.get(slug=slug)

    @staticmethod
    def user(email: str) -> Any:
        return get_user_model().objects.get(email=email)

    def owner(self, ticket: Ticket) -> Any:
        return self.user(OWNERS[ticket.merchant.slug])

    def viewer(self, slug: str) -> Any:
        return (
            Membership.objects.select_related("user").get(merchant__slug=slug, role="viewer").user
        )

    def refund_outside_the_run(
        self, order_reference: str, amount_cents: int, *, when: dt.datetime | None = None
    ) -> Refund:
        """Money that left earlier (a person, another system): it counts against every ceiling."""
        order = self.order(order_reference)
        refund = Refund.objects.create(
            merchant_id=order.merchant_id,
            order=order,
            amount_cents=amount_cents,
            reason="refunded by hand earlier",
        )
        if when is not None:
            Refund.objects.filter(pk=refund.pk).update(created_at=when)
        return refund

    def spend_outside_the_run(
        self, merchant_slug: str, micros: int, *, when: dt.datetime | None = None
    ) -> Run:
        """A finished run of ``merchant_slug`` that spent ``micros`` on the model (today, or ``when``)."""
        merchant = self.merchant(merchant_slug)
        ticket = Ticket.objects.filter(merchant=merchant).order_by("-reference").first()
        assert ticket is not None
        run = run_create(ticket=ticket, user=self.owner(ticket))
        # Spent through the step log, like any run, so its totals still add up.
        log_step(
            run_id=str(run.pk),
            seq=1,
            kind=StepKind.MODEL,
            result=ModelPayload(content=[]),
            cost_micros=micros,
        )
        log_step(
            run_id=str(run.pk), seq=2, kind=StepKind.FINAL, result=EndPayload(status="succeeded")
        )
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.SUCCEEDED, stop_reason="end_turn", finished_at=timezone.now()
        )
        if when is not None:
            Run.objects.filter(pk=run.pk).update(created_at=when)
        return run

    # --- runs --------------------------------------------------------------------

    def start(
        self,
        reference: str,
        provider: Provider | None = None,
        *,
        by: str | None = None,
        forked_from: Run | None = None,
        **run_fields: Any,
    ) -> Run:
        """Start a run on ``reference`` (as the merchant's owner unless ``by``) with ``provider``.

        ``run_fields`` overwrite the run's snapshotted bounds before it is enqueued
        (``max_steps=6``): the same thing a settings change does for new runs.
        """
        ticket = self.ticket(reference)
        user = self.user(by) if by else self.owner(ticket)
        run = run_create(ticket=ticket, user=user)
        fields = dict(run_fields)
        if forked_from is not None:
            fields["forked_from"] = forked_from
        if fields:
            Run.objects.filter(pk=run.pk).update(**fields)
            run.refresh_from_db()
        recorder = Recorder(provider or PolicyProvider())
        self.recorders[str(run.pk)] = recorder
        install_override(str(run.pk), recorder)
        return run_enqueue(run)

    def trajectory(self, run: Run) -> Trajectory:
        return Trajectory(run, self.recorders.get(str(run.pk)))

    @staticmethod
    def pending(run: Run) -> Approval | None:
        return (
            Approval.objects.filter(run=run, status=ApprovalStatus.PENDING)
            .order_by("requested_at")
            .first()
        )

    def wait(self, run: Run, timeout: float = WAIT_SECONDS) -> Run:
        """Until the run is terminal or parked on a pending approval."""
        end = time.monotonic() + timeout
        while True:
            close_old_connections()
            run.refresh_from_db()
            if run.status in TERMINAL_STATUSES:
                until_settled(str(run.pk))
                return run
            if run.status == RunStatus.AWAITING_APPROVAL and self.pending(run) is not None:
                return run
            if time.monotonic() > end:
                raise EvalFailure(
                    f"run stayed {run.status} for {timeout:.0f}s: {self.trajectory(run).path}"
                )
            time.sleep(0.05)

    def wait_terminal(self, run: Run, timeout: float = WAIT_SECONDS) -> Run:
        return self.wait_for(run, lambda r: r.status in TERMINAL_STATUSES, timeout)

    def wait_for(
        self, run: Run, predicate: Callable[[Run], bool], timeout: float = WAIT_SECONDS
    ) -> Run:
        end = time.monotonic() + timeout
        while True:
            run.refresh_from_db()
            if predicate(run):
                return run
            if time.monotonic() > end:
                raise EvalFailure(
                    f"run stayed {run.status} for {timeout:.0f}s: {self.trajectory(run).path}"
                )
            time.sleep(0.05)

    def decide(self, run: Run, decision: Decision) -> Approval:
        approval = self.pending(run)
        expect(
            approval is not None, f"no pending approval to decide; path={self.trajectory(run).path}"
        )
        assert approval is not None
        by = self.user(decision.by) if decision.by else self.owner(run.ticket)
        if decision.changes:
            return approval_approve_with_changes(
                approval=approval,
                user=by,
                changes=decision.changes,
                reason=decision.reason,
                channel="cli",
            )
        return approval_decide(
            approval=approval,
            user=by,
            approve=bool(decision.approve),
            reason=decision.reason,
            channel="cli",
        )

    def drive(self, run: Run, *decisions: Decision, timeout: float = WAIT_SECONDS) -> Trajectory:
        """Answer each gate in turn with ``decisions``, then wait for the next stop.

        Every decision must meet a gate: a run that ends before its last decision fails
        the scenario (it skipped a gate it should have met). ``LEAVE`` stops driving with
        the run parked.
        """
        for i, decision in enumerate(decisions):
            run = self.wait(run, timeout)
            if run.status in TERMINAL_STATUSES:
                raise EvalFailure(
                    f"expected gate #{i + 1} but the run ended {run.status}/{run.stop_reason}: "
                    f"{self.trajectory(run).path}"
                )
            if decision.approve is None:
                return self.trajectory(run)
            self.decide(run, decision)
        return self.trajectory(self.wait(run, timeout))

    def restart(self) -> None:
        self.executor.restart()
