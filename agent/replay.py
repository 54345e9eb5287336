"""Replay: what the model saw at any step, and where a changed prompt would have decided otherwise.

Everything here is rebuilt from the step log; no model is called to *show* a
run, and nothing is ever executed or written. The conversation is rebuilt the
way ``agent.loop.Loop`` built it, block for block:

* the opening user turn is the run's frozen prompt;
* a model step's ``content`` becomes the assistant turn (a refusal is never
  appended, as in the loop);
* each tool call's result becomes a ``tool_result`` block, fenced with the
  run's token (``fence.wrap``), with ``is_error`` set when the call failed —
  a validation error, a tool error, or a person's denial, whose text is
  ``DENIAL_TEXT`` with the approver's reason, exactly as the loop sent it;
* an irreversible call that the ledger answered (a fork re-deriving a call the
  original already paid) writes no step row: its result is read back from the
  ledger entry the loop found, under the root run + call id key;
* staff guidance is fenced and merged into the preceding user turn.

Each model step records how many messages it was sent (``message_count``);
the rebuild checks itself against it and says so when it disagrees.

A fork's steps before its ``fork_step`` are its parent's (DBOS copied their
checkpoints; the fork wrote no rows for them), so a fork's timeline is the
parent's prefix followed by its own steps.

``diverge`` re-asks a provider turn by turn with another system prompt and
compares decisions — tool names and canonical arguments, never prose. After a
matching turn it continues with the *new* reply and the *recorded* results
(ids mapped onto the new reply's ids), so failures and denials are replayed as
the original run saw them. It stops at the first turn that decides otherwise:
past that point there is no recorded observation to feed back.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Any

from agent import fence
from agent.gate import DENIAL_TEXT
from agent.models import LedgerEntry, Run, Step, StepKind
from agent.prompts import system_prompt
from agent.providers.base import Provider
from agent.tools import api_schemas, args_hash
from agent.tools.registry import canonical_json

# --- loading -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LedgerFact:
    args_hash: str
    ok: bool
    text: str
    run_id: str


@dataclasses.dataclass
class Timeline:
    """A run's steps as the loop lived them (a fork's inherited prefix included), read once."""

    run: Run
    root_id: str
    token: str
    steps: list[Step]
    ledger: dict[str, LedgerFact]

    def step_at(self, seq: int) -> Step | None:
        return next((s for s in self.steps if s.seq == seq), None)

    @property
    def last_seq(self) -> int:
        return self.steps[-1].seq if self.steps else 0


def effective_steps(run: Run) -> list[Step]:
    """The run's step log, preceded for a fork by its parent's steps before ``fork_step``."""
    own = list(Step.objects.filter(run=run).order_by("seq"))
    if run.forked_from_id is None or not run.fork_step:
        return own
    parent = Run.objects.get(pk=run.forked_from_id)
    prefix = [s for s in effective_steps(parent) if s.seq < run.fork_step]
    return prefix + [s for s in own if s.seq >= run.fork_step]


def load(run: Run) -> Timeline:
    root = run.root()
    entries = LedgerEntry.objects.filter(root_run=root).only(
        "key", "args_hash", "ok", "result", "run_id"
    )
    return Timeline(
        run=run,
        root_id=str(root.pk),
        token=fence.token_for(str(root.pk)),
        steps=effective_steps(run),
        ledger={e.key: LedgerFact(e.args_hash, e.ok, e.result, str(e.run_id)) for e in entries},
    )


# --- rebuilding the conversation ------------------------------------------------


@dataclasses.dataclass
class Settled:
    """How one tool call of a model turn was answered (``block`` None: nothing was sent)."""

    call: dict[str, Any]
    block: dict[str, Any] | None
    source: str  # tool | denial | ledger | ledger_mismatch | approval_expired | approval_mismatch
    step: Step | None = None
    after_seq: int = 0  # for answers with no step row: the step they followed


@dataclasses.dataclass
class Turn:
    """One recorded model call: what it was sent, what it answered, how its calls settled."""

    step: Step
    messages: list[dict[str, Any]]
    content: list[dict[str, Any]]
    stop_reason: str
    assistant_index: int | None  # where its reply sits in later messages (None: not appended)
    settled: list[Settled] = dataclasses.field(default_factory=list)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return tool_uses(self.content)


def tool_uses(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"]


class Rebuild:
    """Feeds steps in order and keeps the messages the loop held after each of them."""

    def __init__(self, timeline: Timeline) -> None:
        self.tl = timeline
        self.messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": timeline.run.prompt}]}
        ]
        self.turns: list[Turn] = []
        self.results: list[dict[str, Any]] = []
        self.open: collections.deque[dict[str, Any]] = collections.deque()
        self.stopped = ""
        self.warnings: list[str] = []
        self.last_seq = 0

    # The loop wraps every result this way (agent.loop.Loop._result).
    def _block(self, call: dict[str, Any], text: str, ok: bool) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": fence.wrap(text, self.tl.token),
            "is_error": not ok,
        }

    def _settle(self, settled: Settled) -> None:
        if self.turns:
            self.turns[-1].settled.append(settled)
        if settled.block is not None:
            self.results.append(settled.block)

    def _from_ledger(self, call: dict[str, Any]) -> None:
        """A call that left no step: the loop's ``ledger.lookup`` answered it, or refused it."""
        fact = self.tl.ledger.get(f"{self.tl.root_id}:{call.get('id')}")
        if fact is None:
            self.warnings.append(
                f"call {call.get('id')} ({call.get('name')}) after step {self.last_seq} has no step "
                "and no ledger entry; the log ends mid-turn here"
            )
            self.stopped = self.stopped or "unsettled"
            return
        if fact.args_hash != args_hash(call.get("name", ""), call.get("input")):
            self._settle(Settled(call, None, "ledger_mismatch", after_seq=self.last_seq))
            self.stopped = "ledger_mismatch"
            return
        self._settle(
            Settled(call, self._block(call, fact.text, fact.ok), "ledger", after_seq=self.last_seq)
        )

    def _settle_before(self, call_id: str | None) -> dict[str, Any] | None:
        """Answer from the ledger every open call ahead of ``call_id``; return that call."""
        while self.open and not self.stopped:
            head = self.open[0]
            if call_id is not None and head.get("id") == call_id:
                return head
            self.open.popleft()
            self._from_ledger(head)
        return None

    def _flush(self) -> None:
        if self.results:
            self.messages.append({"role": "user", "content": self.results})
            self.results = []

    def prepare(self, step: Step) -> None:
        """What happened between the previous step and ``step`` (ledger answers leave no row)."""
        if self.stopped:
            return
        if step.kind in (StepKind.TOOL, StepKind.APPROVAL) and step.tool_call_id:
            self._settle_before(step.tool_call_id)
        elif step.kind in (
            StepKind.MODEL,
            StepKind.NOTE,
            StepKind.FINAL,
            StepKind.BOUND,
            StepKind.ERROR,
        ):
            if step.kind == StepKind.ERROR or (
                step.kind == StepKind.BOUND and step.result.get("status") == "cancelled"
            ):
                return  # ended from outside the loop: nothing more was settled
            self._settle_before(None)

    def feed(self, step: Step) -> None:
        self.prepare(step)
        if not self.stopped:
            self._apply(step)
        self.last_seq = step.seq

    def _apply(self, step: Step) -> None:
        result = step.result if isinstance(step.result, dict) else {}
        if step.kind == StepKind.MODEL:
            self._flush()
            sent = (step.arguments or {}).get("message_count")
            if isinstance(sent, int) and sent != len(self.messages):
                self.warnings.append(
                    f"step {step.seq}: the model was sent {sent} messages; the rebuild has "
                    f"{len(self.messages)}"
                )
            content = result.get("content") or []
            stop_reason = result.get("stop_reason") or ""
            refused = stop_reason == "refusal"
            turn = Turn(
                step=step,
                messages=copy.deepcopy(self.messages),
                content=content,
                stop_reason=stop_reason,
                assistant_index=None if refused else len(self.messages),
            )
            self.turns.append(turn)
            if refused:
                self.stopped = "model_refusal"
                return
            self.messages.append({"role": "assistant", "content": content})
            self.open = collections.deque(tool_uses(content))
            if not self.open:
                self.stopped = "end_turn"
        elif step.kind == StepKind.TOOL and step.tool_call_id:
            call = self._settle_before(step.tool_call_id)
            if call is None:
                return
            self.open.popleft()
            self._settle(
                Settled(call, self._block(call, str(result.get("text", "")), step.ok), "tool", step)
            )
        elif step.kind == StepKind.APPROVAL and step.tool_call_id:
            event = result.get("event")
            call = self._settle_before(step.tool_call_id)
            if call is None or event in ("requested", "approved"):
                return  # the tool step that follows an approval carries the result
            self.open.popleft()
            if event == "denied":
                text = DENIAL_TEXT.format(reason=result.get("reason") or "(no reason given)")
                self._settle(Settled(call, self._block(call, text, False), "denial", step))
            else:
                self._settle(Settled(call, None, f"approval_{event}", step))
                self.stopped = f"approval_{event}"
        elif step.kind == StepKind.NOTE:
            self._flush()
            guidance = [
                {
                    "type": "text",
                    "text": f"Staff guidance from {n['author']} (merchant staff, via the console):\n"
                    f"{fence.wrap(n['body'], self.tl.token)}",
                }
                for n in result.get("notes", [])
            ]
            if guidance and self.messages[-1]["role"] == "user":
                self.messages[-1] = {
                    **self.messages[-1],
                    "content": [*self.messages[-1]["content"], *guidance],
                }
            elif guidance:
                self.messages.append({"role": "user", "content": guidance})
        elif step.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR):
            self._flush()
            self.stopped = str(result.get("stop_reason") or result.get("status") or step.kind)

    def current(self) -> list[dict[str, Any]]:
        """The messages as held now, with this turn's results so far as a last user turn."""
        out = copy.deepcopy(self.messages)
        if self.results:
            out.append({"role": "user", "content": copy.deepcopy(self.results)})
        return out


def rebuild(timeline: Timeline) -> Rebuild:
    r = Rebuild(timeline)
    for step in timeline.steps:
        r.feed(step)
    return r


@dataclasses.dataclass
class View:
    """What the model saw before step ``before``."""

    run_id: str
    before: int
    step: Step | None
    system: str
    messages: list[dict[str, Any]]
    exact: bool  # True when ``before`` is a model step: these are the very messages it was sent
    partial: bool  # the last user turn holds only part of a turn's results
    warnings: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "before_seq": self.before,
            "system": self.system,
            "messages": self.messages,
            "exact": self.exact,
            "warnings": self.warnings,
        }


def view_at(timeline: Timeline, n: int) -> View:
    """The conversation the loop held when it was about to run step ``n``."""
    r = Rebuild(timeline)
    for step in timeline.steps:
        if step.seq >= n:
            break
        r.feed(step)
    target = timeline.step_at(n)
    if target is not None:
        r.prepare(target)  # ledger answers given between the previous step and this one
    messages = r.current()
    exact = target is not None and target.kind == StepKind.MODEL
    warnings = list(r.warnings)
    if exact and target is not None:
        sent = (target.arguments or {}).get("message_count")
        if isinstance(sent, int) and sent != len(messages):
            warnings.append(
                f"step {n}: the model was sent {sent} messages; the rebuild has {len(messages)}"
            )
    return View(
        run_id=str(timeline.run.pk),
        before=n,
        step=target,
        system=system_prompt(timeline.token),
        messages=messages,
        exact=exact,
        partial=bool(r.results),
        warnings=warnings,
    )


def ledger_answers(timeline: Timeline) -> list[Settled]:
    """Calls answered (or refused) by the ledger with no step row of their own, in order."""
    r = rebuild(timeline)
    return [s for t in r.turns for s in t.settled if s.source in ("ledger", "ledger_mismatch")]


# --- divergence ---------------------------------------------------------------------


def decisions(content: list[dict[str, Any]], stop_reason: str) -> list[str]:
    """What a turn decided, comparable across replies: tool names and canonical arguments."""
    if stop_reason == "refusal":
        return ["(refused)"]
    return [f"{b.get('name')}({canonical_json(b.get('input') or {})})" for b in tool_uses(content)]


@dataclasses.dataclass
class Divergence:
    seq: int | None  # the model step that decided otherwise; None: no divergence
    matched: int
    total: int
    original: list[str]
    now: list[str]
    now_text: str
    cost_micros: int
    input_tokens: int
    output_tokens: int

    @property
    def diverged(self) -> bool:
        return self.seq is not None


def _rewrite(
    messages: list[dict[str, Any]], replies: dict[int, list[dict[str, Any]]], ids: dict[str, str]
) -> list[dict[str, Any]]:
    """The recorded messages with earlier assistant turns replaced by the new replies."""
    out = []
    for i, message in enumerate(messages):
        if i in replies:
            out.append({"role": "assistant", "content": copy.deepcopy(replies[i])})
            continue
        blocks = message.get("content")
        if message.get("role") == "user" and isinstance(blocks, list):
            blocks = [
                {**b, "tool_use_id": ids.get(str(b.get("tool_use_id")), b.get("tool_use_id"))}
                if isinstance(b, dict) and b.get("type") == "tool_result"
                else b
                for b in blocks
            ]
            out.append({**message, "content": copy.deepcopy(blocks)})
        else:
            out.append(copy.deepcopy(message))
    return out


def diverge(timeline: Timeline, provider: Provider, system: str) -> Divergence:
    """Re-ask ``provider`` every recorded turn under ``system``; stop at the first other decision.

    Reads nothing from the database and writes nothing: the timeline was loaded beforehand, and
    the provider is called directly, never through a step.
    """
    turns = rebuild(timeline).turns
    replies: dict[int, list[dict[str, Any]]] = {}
    ids: dict[str, str] = {}
    tokens_in = tokens_out = cost = 0
    tools = api_schemas()
    for matched, turn in enumerate(turns):
        messages = _rewrite(turn.messages, replies, ids)
        reply = provider.complete(system=system, messages=messages, tools=tools)
        tokens_in += reply.input_tokens
        tokens_out += reply.output_tokens
        cost += reply.cost_micros
        before = decisions(turn.content, turn.stop_reason)
        now = decisions(reply.content, reply.stop_reason)
        if before != now:
            return Divergence(
                seq=turn.step.seq,
                matched=matched,
                total=len(turns),
                original=before,
                now=now,
                now_text=reply.text,
                cost_micros=cost,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
            )
        if turn.assistant_index is not None:
            replies[turn.assistant_index] = reply.content
        for old, new in zip(turn.calls, tool_uses(reply.content), strict=True):
            if old.get("id") and new.get("id"):
                ids[old["id"]] = new["id"]
    return Divergence(None, len(turns), len(turns), [], [], "", cost, tokens_in, tokens_out)


def custom_system_prompt(text: str, token: str) -> str:
    """A prompt from a file: its ``{opener}``, ``{closer}`` and ``{token}`` are filled like the real one."""
    return (
        text.replace("{opener}", fence.opener(token))
        .replace("{closer}", fence.closer(token))
        .replace("{token}", token)
    )
