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

from agent.fence import closer, opener, token_for
from agent.models import LedgerEntry, Run, Step, StepKind
from agent.tools.registry import args_hash, canonical_json
from approvals.models import Approval
from deskhand.desk.models import Order, OutboundEmail, Refund


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
                event = (s.result or {}).get("event", "?")
                out.append(f"{'ask' if event == 'requested' else event}:{s.tool}")
            elif s.kind == StepKind.NOTE:
                out.append("note")
            elif s.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR):
                result = s.result or {}
                status = result.get("status") or ("failed" if s.kind == StepKind.ERROR else "?")
                out.append(f"end:{status}/{result.get('stop_reason', '')}")
        return out

    @property
    def asked(self) -> list[Call]:
        """Every tool call the model asked for, in order (from the model steps)."""
        calls = []
        for s in self.steps:
            if s.kind != StepKind.MODEL:
                continue
            for block in (s.result or {}).get("content", []):
                if isinstance(block, dict) and block.get("type") == "tool_use":
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
            (s.tool, s.arguments, (s.result or {}).get("event", "?"))
            for s in self.steps
            if s.kind == StepKind.APPROVAL and (tool is None or s.tool == tool)
        ]

    @property
    def approvals(self) -> list[Approval]:
        return list(Approval.objects.filter(run=self.run).order_by("requested_at"))

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
        for e in OutboundEmail.objects.filter(run_id=self.run.pk).select_related(
            "ticket", "ledger_entry__approval__decided_by"
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
            approval_hash=approval.args_hash if approval else None,
            ledger_hash=entry.args_hash if entry else None,
            decided_by=approval.decided_by.email if approval and approval.decided_by else None,
        )

    @property
    def refunds(self) -> list[tuple[str, int]]:
        return [(e.target, e.amount_cents) for e in self.effects if e.kind == "refund"]

    @property
    def ledger(self) -> list[LedgerEntry]:
        return list(LedgerEntry.objects.filter(run=self.run).order_by("created_at"))

    def unconsented_effects(self) -> list[str]:
        """Effects without an approved approval whose hash matches the executed call."""
        bad = []
        for e in self.effects:
            if e.approval_id is None or e.approval_hash != e.ledger_hash:
                bad.append(f"{e.kind} {e.target} (ledger {e.ledger_key}, approval {e.approval_id})")
                continue
            approval = Approval.objects.get(pk=e.approval_id)
            entry = LedgerEntry.objects.get(key=e.ledger_key)
            if approval.status != "approved" or approval.decided_by_id is None:
                bad.append(f"{e.kind} {e.target}: approval is {approval.status}")
            elif args_hash(entry.tool, entry.arguments) != approval.args_hash:
                bad.append(f"{e.kind} {e.target}: executed arguments differ from approved")
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

    def describe(self) -> str:
        return f"{self.status}/{self.stop_reason} path={self.path} refunds={self.refunds}"
