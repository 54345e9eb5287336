"""A run's conversation rebuilt from its step log, by the rule the loop lives by.

``Rebuild`` feeds a run's recorded steps, in order, through the very ``Conversation`` the
loop builds its messages with (``agent.conversation.live``), so what replay, divergence,
forks and the console show is what the provider was handed — byte for byte (a test holds
this for every step of a recorded run). An irreversible call the ledger answered (a fork
re-deriving a call the original already paid) leaves no step row: the rebuild reads its
result from the ledger entry under the root run + call id key.

``at(recorded, n)`` is what ``replay --at N`` prints: the messages the loop held when it
was about to run step ``n``. For a model step these are exactly the messages that call
was sent. For any other step they are the same conversation as far as it had been built:
every complete turn is byte-equal to the next model call's, and the last user turn holds
this turn's results so far (``partial``); the next model call gets the rest of them, and
any staff guidance, appended to it.

Over 400 lines because ``Rebuild`` mirrors the loop step for step; the mirror is only
checkable whole.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Any

from agent.conversation.live import (
    KNOWN_STOP_REASONS,
    NOT_RUN_STEP_CAP,
    Conversation,
    Message,
    prompt_sha256,
    tool_uses,
    unrunnable,
)
from agent.conversation.prompt_versions import TOKEN_SLOT, render, template_of, version_sha256
from agent.conversation.prompts import system_prompt
from agent.models import Step, StopReason, payloads
from agent.models.payloads import StepKind
from agent.replay import compat
from agent.replay.timeline import Timeline
from agent.steps import ApprovalPayload, EndPayload, ModelPayload, NotePayload, ToolPayload
from agent.tools import api_schemas, args_hash
from agent.tools.irreversible import ASKED_PREFIX, REMINDER_CALL_SUFFIX


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
    messages: list[Message]
    content: list[dict[str, Any]]
    stop_reason: str
    assistant_index: int | None  # where its reply sits in later messages (None: not appended)
    settled: list[Settled] = dataclasses.field(default_factory=list)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return tool_uses(self.content)


def fence_in_turn(timeline: Timeline) -> bool:
    """Whether this run's fence token is in its opening turn rather than its system prompt.

    Read from what its first model call recorded: its prompt version's template holds the
    token's slot when the token was in the system prompt (an older step that names no
    version: ``agent.replay.compat``). A run with no model call yet is a new one.
    """
    first = next((s for s in timeline.steps if s.kind == StepKind.MODEL), None)
    if first is None:
        return True
    payload = payloads.read_as(first, ModelPayload)
    version = timeline.versions.get(payload.prompt_version)
    if version is not None:
        return TOKEN_SLOT not in version.system_template
    return compat.fence_in_turn_unversioned(payload.prompt_sha256, timeline.token)


def system_for(timeline: Timeline) -> str:
    """The system prompt today's code sends this run (by where its fence token lives)."""
    return system_prompt(None if fence_in_turn(timeline) else timeline.token)


def current_version(timeline: Timeline) -> str:
    """The prompt version today's code would send this run (``agent.conversation.prompt_versions``)."""
    token = "" if fence_in_turn(timeline) else timeline.token
    return version_sha256(template_of(system_for(timeline), token), api_schemas())


class Rebuild:
    """Feeds recorded steps in order through a ``Conversation``, as the loop lived them."""

    def __init__(self, timeline: Timeline) -> None:
        self.tl = timeline
        self.conversation = Conversation(
            timeline.run.prompt, timeline.token, fence_in_turn(timeline)
        )
        self.turns: list[Turn] = []
        self.results: list[dict[str, Any]] = []
        self.open: collections.deque[dict[str, Any]] = collections.deque()
        self.stopped = ""
        self.warnings: list[str] = []
        self.last_seq = 0
        self.truncations = 0
        self.nudge = False
        self.reply_content: list[dict[str, Any]] = []
        self.reply_stop = ""

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    def _settle(self, settled: Settled) -> None:
        if self.turns:
            self.turns[-1].settled.append(settled)
        if settled.block is not None:
            self.results.append(settled.block)

    def _from_ledger(self, call: dict[str, Any], ending: bool = False) -> None:
        """A call that left no step: the loop's ``ledger.lookup`` answered it, or refused it,
        or the loop never ran it (``unrunnable``, or past the step cap)."""
        why = unrunnable(call, self.reply_content, self.reply_stop)
        if why:
            block = self.conversation.result(call, why, False)
            self._settle(Settled(call, block, "not_run", after_seq=self.last_seq))
            return
        fact = self.tl.ledger_answer(call)
        if fact is None and ending:
            # Settled by a later model call or the run's end with no row: past the step cap.
            block = self.conversation.result(call, NOT_RUN_STEP_CAP, False)
            self._settle(Settled(call, block, "step_cap", after_seq=self.last_seq))
            return
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
        block = self.conversation.result(call, fact.text, fact.ok)
        self._settle(Settled(call, block, "ledger", after_seq=self.last_seq))

    def _settle_before(self, call_id: str | None) -> dict[str, Any] | None:
        """Answer from the ledger every open call ahead of ``call_id``; return that call."""
        while self.open and not self.stopped:
            head = self.open[0]
            if (
                call_id is not None
                and head.get("id") == call_id
                and not unrunnable(head, self.reply_content, self.reply_stop)
            ):
                return head
            self.open.popleft()
            self._from_ledger(head, ending=call_id is None)
        return None

    def _flush(self) -> None:
        self.conversation.results(self.results)
        self.results = []
        if self.nudge:
            self.conversation.finish_briefly()
            self.nudge = False

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
            end = payloads.read(step)
            if step.kind == StepKind.ERROR or (
                step.kind == StepKind.BOUND
                and isinstance(end, EndPayload)
                and end.status == "cancelled"
            ):
                return  # ended from outside the loop: nothing more was settled
            self._settle_before(None)

    def feed(self, step: Step) -> None:
        if (step.tool_call_id or "").endswith(REMINDER_CALL_SUFFIX):
            return  # the wait's own reminder (agent.customer.wait): not in the conversation
        self.prepare(step)
        if not self.stopped:
            self._apply(step)
        self.last_seq = step.seq

    def _apply(self, step: Step) -> None:
        p = payloads.read(step)
        if isinstance(p, ModelPayload):
            self._flush()
            if p.message_count is not None and p.message_count != len(self.messages):
                self.warnings.append(
                    f"step {step.seq}: the model was sent {p.message_count} messages; the rebuild "
                    f"has {len(self.messages)}"
                )
            if p.stop_reason == "max_tokens":
                self.truncations += 1
            refused = (
                p.stop_reason in ("refusal", "model_context_window_exceeded")
                or (p.stop_reason == "max_tokens" and self.truncations > 1)
                or (p.stop_reason not in KNOWN_STOP_REASONS and self._ended_on_unknown_stop())
            )
            self.turns.append(
                Turn(
                    step=step,
                    messages=copy.deepcopy(self.messages),
                    content=p.content,
                    stop_reason=p.stop_reason,
                    assistant_index=None if refused else len(self.messages),
                )
            )
            if refused:
                self.stopped = {
                    "refusal": "model_refusal",
                    "max_tokens": "truncated",
                    "model_context_window_exceeded": "context_window_exceeded",
                }.get(p.stop_reason, StopReason.UNKNOWN_STOP_REASON)
                return
            self.conversation.reply(p.content)
            self.reply_content, self.reply_stop = p.content, p.stop_reason
            self.open = collections.deque(tool_uses(p.content))
            self.nudge = p.stop_reason == "max_tokens"
            if not self.open and p.stop_reason not in ("max_tokens", "pause_turn"):
                self.stopped = "end_turn"
        elif isinstance(p, ToolPayload) and step.tool_call_id:
            if step.tool == "ask_customer" and step.ok and ASKED_PREFIX in p.text:
                return  # the question went out; the answer's row (agent.customer) settles it
            call = self._settle_before(step.tool_call_id)
            if call is None:
                return
            self.open.popleft()
            block = self.conversation.result(call, p.text, step.ok)
            self._settle(Settled(call, block, "tool", step))
        elif isinstance(p, ApprovalPayload) and step.tool_call_id:
            call = self._settle_before(step.tool_call_id)
            if call is None or p.event in ("requested", "approved"):
                return  # the tool step that follows an approval carries the result
            self.open.popleft()
            if p.event == "denied":
                block = self.conversation.denial(call, p.reason)
                self._settle(Settled(call, block, "denial", step))
            else:
                self._settle(Settled(call, None, f"approval_{p.event}", step))
                self.stopped = f"approval_{p.event}"
        elif isinstance(p, NotePayload):
            self._flush()
            self.conversation.guidance(p.notes)
        elif isinstance(p, EndPayload):
            self._flush()
            self.stopped = p.stop_reason or p.status or step.kind

    def _ended_on_unknown_stop(self) -> bool:
        """Whether this run ended on an unknown stop reason. Runs started before that rule
        (patch ``unknown-stop-reason-ends-run``) went on past one, and their rows say so."""
        return any(
            s.kind in (StepKind.BOUND, StepKind.FINAL, StepKind.ERROR)
            and getattr(payloads.read(s), "stop_reason", "") == StopReason.UNKNOWN_STOP_REASON
            for s in self.tl.steps
        )

    def current(self) -> list[Message]:
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
    """What the model saw before step ``before`` (see the module docstring)."""

    run_id: str
    before: int
    step: Step | None
    # The system prompt (with the run's fence token) and tools the model step these messages go
    # to was sent — ``before`` itself, else the next model step, else the last one — from its
    # recorded prompt version; today's when it has none (``recorded`` False).
    system: str
    tools: list[dict[str, Any]]
    messages: list[Message]
    exact: bool  # True when ``before`` is a model step: these are the very messages it was sent
    partial: bool  # the last user turn holds only part of a turn's results
    warnings: list[str]
    # The hash that model step recorded over the system text and tools it was sent; None when
    # the run made no model call.
    prompt_sha256: str | None
    # Its prompt version (``agent.conversation.prompt_versions``); None when the step names none.
    prompt_version: str | None = None
    recorded: bool = False  # ``system`` and ``tools`` are the recorded ones
    # Whether today's code would send that step the same system prompt and tools.
    prompt_current: bool = True

    def as_json(self) -> dict[str, Any]:
        """What ``replay --at N --json`` prints."""
        return {
            "system": self.system,
            "tools": self.tools,
            "messages": self.messages,
            "prompt_sha256": self.prompt_sha256,
            "prompt_version": self.prompt_version,
            "prompt_current": self.prompt_current,
        }


def _model_step_for(steps: list[Step], n: int) -> ModelPayload | None:
    """The payload of the model step step ``n``'s messages go to (see ``View``)."""
    models = [s for s in steps if s.kind == StepKind.MODEL]
    chosen = next((s for s in models if s.seq >= n), models[-1] if models else None)
    return None if chosen is None else payloads.read_as(chosen, ModelPayload)


def _prompt_for(timeline: Timeline, n: int, warnings: list[str]) -> dict[str, Any]:
    """``View``'s prompt fields for step ``n``: the recorded version, else today's prompt."""
    today_system, today_tools = system_for(timeline), api_schemas()
    chosen = _model_step_for(timeline.steps, n)
    sent = (chosen.prompt_sha256 or None) if chosen else None
    version = (chosen.prompt_version or None) if chosen else None
    stored = timeline.versions.get(version or "")
    if stored is None:
        if version:
            warnings.append(
                f"prompt version {version[:12]} is not stored; showing today's system prompt"
            )
        return {
            "system": today_system,
            "tools": today_tools,
            "prompt_sha256": sent,
            "prompt_version": version,
            "recorded": False,
            # Unknown (no hash recorded) is not "current".
            "prompt_current": sent is not None and sent == prompt_sha256(today_system, today_tools),
        }
    system, tools = render(stored.system_template, timeline.token), list(stored.tools)
    if sent and sent != prompt_sha256(system, tools):
        warnings.append(
            f"prompt version {version and version[:12]} does not hash to what the step recorded"
        )
    return {
        "system": system,
        "tools": tools,
        "prompt_sha256": sent,
        "prompt_version": version,
        "recorded": True,
        "prompt_current": version == current_version(timeline),
    }


def at(timeline: Timeline, n: int) -> View:
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
        sent = payloads.read_as(target, ModelPayload).message_count
        if sent is not None and sent != len(messages):
            warnings.append(
                f"step {n}: the model was sent {sent} messages; the rebuild has {len(messages)}"
            )
    return View(
        run_id=str(timeline.run.pk),
        before=n,
        step=target,
        messages=messages,
        exact=exact,
        partial=bool(r.results),
        warnings=warnings,
        **_prompt_for(timeline, n, warnings),
    )


def ledger_answers(timeline: Timeline) -> list[Settled]:
    """Calls answered (or refused) by the ledger with no step row of their own, in order."""
    r = rebuild(timeline)
    return [s for t in r.turns for s in t.settled if s.source in ("ledger", "ledger_mismatch")]
