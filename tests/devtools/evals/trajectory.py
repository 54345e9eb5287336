"""A run read back as the path it took: what it asked, who decided, what it did to the world.

Evals assert on this, not on the final answer. Everything comes from rows the
product writes anyway — the step log, approvals, the ledger and the effect
rows — plus, for what the model was shown, the ``Recorder`` around the provider.

``path`` is the run as a list of short words, one per step that mattered:

- ``get_order`` — a tool step that succeeded; ``get_order!`` — one that failed
- ``ask:issue_refund`` — an approval requested; ``approved:…``, ``denied:…``,
  ``expired:…``, ``mismatch:…`` — how the gate settled it
- ``note`` — staff guidance handed to the model
- ``end:succeeded/end_turn`` — the terminal step
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agent.conversation.fence import closer, opener, token_for
from agent.models import Run, Step, payloads
from agent.models.ledger import LedgerEntry
from agent.models.payloads import StepKind
from agent.tools.narrowing import NarrowingRefused, narrowed_arguments
from agent.tools.registry import args_hash, canonical_json
from approvals.models import Approval
from deskhand.domain.desk.models import Order, OutboundEmail, Refund

# Words to the customer on the thread (agent.tools.irreversible): not a remedy under test.
CUSTOMER_REPLIES = ("reply_to_customer", "ask_customer")


@dataclasses.dataclass(frozen=True)
class Call:
    """A tool call the model asked for, with its canonical arguments."""

    seq: int
    id: str
    tool: str
    args: Any

    @property
    def canonical(self) -> str:
        return canonical_json(self.args)


@dataclasses.dataclass(frozen=True)
class Effect:
    """Something irreversible this run did to the world, and what it was done under."""

    kind: str  # refund | email | cancel
    target: str  # order reference or ticket reference
    amount_cents: int
    ledger_key: str | None
    approval_id: str | None
    approval_hash: str | None
    ledger_hash: str | None
    decided_by: str | None


def subset(args: Any, **expected: Any) -> bool:
    return isinstance(args, dict) and all(args.get(k) == v for k, v in expected.items())


class Trajectory:
    def __init__(self, run: Run, recorder: Any = None) -> None:
        run.refresh_from_db()
        self.run = run
        self.recorder = recorder
        self.steps = list(Step.objects.filter(run=run).order_by("seq"))

    # --- the terminal state ------------------------------------------------------

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def stop_reason(self) -> str:
        return self.run.stop_reason

    @property
    def summary(self) -> str:
        return self.run.summary

    @property
    def terminal_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR)]

    # --- the path ----------------------------------------------------------------------

    @property
    def path(self) -> list[str]:
        out: list[str] = []
        for s in self.steps:
            if s.kind == StepKind.TOOL:
                out.append(s.tool + ("" if s.ok else "!"))
            elif s.kind == StepKind.APPROVAL:
                event = payloads.read_as(s, payloads.ApprovalPayload).event or "?"
                out.append(f"{'ask' if event == 'requested' else event}:{s.tool}")
            elif s.kind == StepKind.NOTE:
                out.append("note")
            elif s.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR):
                end = payloads.read_as(s, payloads.EndPayload)
                status = end.status or ("failed" if s.kind == StepKind.ERROR else "?")
                out.append(f"end:{status}/{end.stop_reason}")
        return out

    @property
    def asked(self) -> list[Call]:
        """Every tool call the model asked for, in order (from the model steps)."""
        calls = []
        for s in self.steps:
            if s.kind != StepKind.MODEL:
                continue
            for block in payloads.read_as(s, payloads.ModelPayload).calls:
                if block.get("type") == "tool_use":
                    calls.append(
                        Call(
                            s.seq,
                            str(block.get("id", "")),
                            str(block.get("name", "")),
                            block.get("input"),
                        )
                    )
        return calls

    def tool_steps(self, tool: str | None = None, ok: bool | None = None) -> list[Step]:
        return [
            s
            for s in self.steps
            if s.kind == StepKind.TOOL
            and (tool is None or s.tool == tool)
            and (ok is None or s.ok == ok)
        ]

    def gate_events(self, tool: str | None = None) -> list[tuple[str, Any, str]]:
        """(tool, arguments, event) for every gate step."""
        return [
            (s.tool, s.arguments, payloads.read_as(s, payloads.ApprovalPayload).event or "?")
            for s in self.steps
            if s.kind == StepKind.APPROVAL and (tool is None or s.tool == tool)
        ]

    @property
    def approvals(self) -> list[Approval]:
        """The approvals of the run's remedies (money, orders, emails): the replies to the
        customer the owner's rule approves are in ``replies``."""
        return list(
            Approval.objects.filter(run=self.run)
            .exclude(tool__in=CUSTOMER_REPLIES)
            .order_by("requested_at")
        )

    @property
    def replies(self) -> list[Approval]:
        return list(
            Approval.objects.filter(run=self.run, tool__in=CUSTOMER_REPLIES).order_by(
                "requested_at"
            )
        )

    @property
    def model_calls(self) -> int:
        return sum(1 for s in self.steps if s.kind == StepKind.MODEL)

    # --- the world ---------------------------------------------------------------------

    @property
    def effects(self) -> list[Effect]:
        out = []
        for r in Refund.objects.filter(run_id=self.run.pk).select_related(
            "order", "ledger_entry__approval__decided_by"
        ):
            out.append(self._effect("refund", r.order.reference, r.amount_cents, r.ledger_entry))
        for e in (
            OutboundEmail.objects.filter(run_id=self.run.pk)
            .exclude(ledger_entry__tool__in=CUSTOMER_REPLIES)
            .select_related("ticket", "ledger_entry__approval__decided_by")
        ):
            out.append(
                self._effect("email", e.ticket.reference if e.ticket else "?", 0, e.ledger_entry)
            )
        for o in Order.objects.filter(cancel_ledger_entry__run_id=self.run.pk).select_related(
            "cancel_ledger_entry__approval__decided_by"
        ):
            out.append(self._effect("cancel", o.reference, 0, o.cancel_ledger_entry))
        return out

    @staticmethod
    def _effect(kind: str, target: str, amount: int, entry: LedgerEntry | None) -> Effect:
        approval = entry.approval if entry else None
        return Effect(
            kind=kind,
            target=target,
            amount_cents=amount,
            ledger_key=entry.key if entry else None,
            approval_id=str(approval.id) if approval else None,
            approval_hash=(approval.approved_hash or approval.args_hash) if approval else None,
            ledger_hash=entry.args_hash if entry else None,
            decided_by=approval.decided_by.email if approval and approval.decided_by else None,
        )

    @property
    def refunds(self) -> list[tuple[str, int]]:
        return [(e.target, e.amount_cents) for e in self.effects if e.kind == "refund"]

    @property
    def ledger(self) -> list[LedgerEntry]:
        """The run's remedies in the ledger (its replies to the customer left out, as above)."""
        return list(
            LedgerEntry.objects.filter(run=self.run)
            .exclude(tool__in=CUSTOMER_REPLIES)
            .order_by("created_at")
        )

    def unconsented_effects(self) -> list[str]:
        """Effects without a decision — a person's, or a versioned merchant rule a person
        wrote — that approved exactly the executed call (the proposal, or a narrowing of it)."""
        bad = []
        for e in self.effects:
            if e.approval_id is None:
                bad.append(f"{e.kind} {e.target} (ledger {e.ledger_key}, no approval)")
                continue
            approval = Approval.objects.select_related("policy").get(pk=e.approval_id)
            entry = LedgerEntry.objects.get(key=e.ledger_key)
            why = consent_problem(approval, entry)
            if why:
                bad.append(f"{e.kind} {e.target}: {why}")
        return bad

    # --- what the model saw --------------------------------------------------------

    @property
    def token(self) -> str:
        return token_for(str(self.run.root().pk))

    def model_saw(self) -> list[dict[str, Any]]:
        """The (system, messages) of every model call this process made for the run."""
        return list(getattr(self.recorder, "calls", []))

    def tool_results_seen(self) -> list[dict[str, Any]]:
        """Every tool_result block in the last request the model received (it holds them all)."""
        seen = self.model_saw()
        if not seen:
            return []
        return [
            b
            for m in seen[-1]["messages"]
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]

    def unfenced_results(self) -> list[str]:
        """Tool results the model saw that are not exactly one fence around their content."""
        o, c = opener(self.token), closer(self.token)
        bad = []
        for b in self.tool_results_seen():
            text = b.get("content")
            text = text if isinstance(text, str) else json.dumps(text)
            if (
                not (text.startswith(o + "\n") and text.endswith("\n" + c))
                or text.count(o) != 1
                or text.count(c) != 1
            ):
                bad.append(text[:120])
        return bad


def consent_problem(approval: Approval, entry: LedgerEntry) -> str:
    """Why ``entry``'s effect was not consented to, or "" (the consent invariant, in one place).

    Consent is a recorded decision by a person, or by a versioned merchant rule a person
    wrote, approving exactly the call performed: the proposal, or a narrowing of it that
    the tool registry allows, with the recorded hash of what was approved.
    """
    if approval.status != "approved":
        return f"approval is {approval.status}"
    if approval.channel == "policy":
        if approval.policy is None or approval.policy_rule is None or approval.decided_by_id:
            return "a policy decision that names no policy version and rule"
        if not approval.policy.author:
            return "a policy no person wrote"
    elif not approval.decider:
        return "approved by nobody"
    performed = args_hash(entry.tool, entry.arguments)
    approved = approval.approved_hash or approval.args_hash
    if performed != entry.args_hash or performed != approved:
        return "executed arguments differ from the approved ones"
    if approved != approval.args_hash:
        try:
            narrowed = narrowed_arguments(approval.tool, approval.arguments, entry.arguments)
        except NarrowingRefused as exc:
            return f"the approved call is not a narrowing of the proposal: {exc}"
        if args_hash(entry.tool, narrowed) != performed:
            return "the approved call is not a narrowing of the proposal"
    if str(approval.run_id) != str(entry.run_id) or approval.tool_call_id != entry.tool_call_id:
        return "approval belongs to another call"
    return ""
