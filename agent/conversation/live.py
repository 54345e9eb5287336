"""The conversation a run's model is handed: one rule, used live and rebuilt from the step log.

``Conversation`` is the shape. The loop (``agent.loop``) builds the messages it
sends through it, one event at a time, and ``agent.replay.rebuild`` feeds a run's recorded
steps through the very same methods, so what replay, divergence, forks and the
console show is what the provider was handed — byte for byte (a test holds
this for every step of a recorded run).

The rule:

* the opening user turn is the run's frozen prompt;
* a model reply becomes the assistant turn (a refusal, a context-window stop,
  a second ``max_tokens`` cut-off and a stop reason not in ``KNOWN_STOP_REASONS``
  are never appended: the run stops); a
  reply after ``pause_turn`` continues that same assistant turn;
* a tool call the loop must not run is answered without a step row, by a rule
  that reads the reply alone (``unrunnable``): a call with no name, a name too
  long for any tool, an id not a 1-80 character string, an id the model step had to
  replace (``agent.conversation.untrusted``: missing, repeated, or one the API refuses), an input
  that is not an object, or the last block of a reply cut off by ``max_tokens``; calls past the
  step cap are answered ``NOT_RUN_STEP_CAP`` (the cap is reached, so the run
  ends at the next bounds check);
* after a reply cut off by ``max_tokens``, the user turn asks the model to
  finish briefly (``FINISH_BRIEFLY``);
* each tool call's result becomes a ``tool_result`` block, fenced with the
  run's token (``fence.wrap``), ``is_error`` when the call failed — a
  validation error, a tool error, or a person's denial (``DENIAL_TEXT`` with
  the approver's reason); one turn's results go back as one user turn;
* staff guidance is fenced and joins the last user turn (two user turns in a
  row are not allowed), or opens one if the last turn is the assistant's;
* an irreversible call the ledger answered (a fork re-deriving a call the
  original already paid) leaves no step row: ``rebuild`` reads its result from
  the ledger entry under the root run + call id key.

The same rule read back from a run's step log — for replay, divergence, forks and the
console — is ``agent.replay.rebuild``, which feeds recorded steps through this class.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from agent.conversation import fence
from agent.conversation.prompts import fence_notice
from agent.conversation.untrusted import REPLACED_ID_PREFIX
from agent.steps import Note
from agent.tools.registry import canonical_json

DENIAL_TEXT = (
    "A person declined this action. Reason: {reason}\n"
    "Do not retry the same action. Propose a different course (for example, escalate the ticket), "
    "or explain what you would need in order to proceed."
)

# The stop reasons the loop knows what to do with (agent.loop); any other ends the run.
KNOWN_STOP_REASONS = frozenset(
    {
        "end_turn",
        "stop_sequence",
        "tool_use",
        "max_tokens",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
NOT_RUN_STEP_CAP = "not run: step cap reached"
CUT_OFF = "not run: this tool call was cut off by the output limit (max_tokens)"
FINISH_BRIEFLY = (
    "Your last reply was cut off at the output limit. Finish now, briefly: make at most the one "
    "tool call you still need, then summarise what you did and why in a few sentences."
)
# A Step row holds a tool name of up to 40 characters and a call id of up to 80.
MAX_TOOL_NAME = 40
MAX_CALL_ID = 80

GUIDANCE = "Staff guidance from {author} (merchant staff, via the console):\n"

Message = dict[str, Any]
# Content blocks as the Messages API shapes them: a ``tool_use`` call the model made, and the
# ``tool_result`` that answers it.
Call = dict[str, Any]
Result = dict[str, Any]


def prompt_sha256(system: str, tools: list[dict[str, Any]]) -> str:
    """The hash a model step records of what it was sent besides the messages."""
    return hashlib.sha256(canonical_json({"system": system, "tools": tools}).encode()).hexdigest()


def messages_sha256(messages: list[Message]) -> str:
    return hashlib.sha256(canonical_json(messages).encode()).hexdigest()


INVALID_TOOL = "invalid_tool_call"
_API_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _sendable(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") != "tool_use":
        return block
    name, args = block.get("name"), block.get("input")
    if isinstance(name, str) and _API_TOOL_NAME.match(name) and isinstance(args, dict):
        return block
    return {**block, "name": INVALID_TOOL, "input": {}}


def unrunnable(call: Mapping[str, Any], content: list[dict[str, Any]], stop_reason: str) -> str:
    """Why the loop answers ``call`` (a block of ``content``) with an error and never runs it.

    A pure function of the reply, so replay applies the same rule. Empty: run it.
    """
    name, call_id = call.get("name"), call.get("id")
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= MAX_CALL_ID:
        return f"not run: the tool call id must be 1 to {MAX_CALL_ID} characters"
    if call_id.startswith(REPLACED_ID_PREFIX):
        return (
            "not run: the tool call's id was missing, repeated or not of the form "
            "[a-zA-Z0-9_-]+, so it was replaced; make the call again if you still need it"
        )
    if not isinstance(name, str) or not name:
        return "not run: the tool call has no tool name"
    if len(name) > MAX_TOOL_NAME:
        return f"not run: there is no tool with that name (names are at most {MAX_TOOL_NAME} characters)"
    if not isinstance(call.get("input"), dict):
        return "not run: the tool input must be a JSON object"
    if stop_reason == "max_tokens" and content and content[-1] == call:
        return CUT_OFF
    return ""


def with_guidance(messages: list[Message], notes: Iterable[Note], token: str) -> list[Message]:
    """``messages`` with staff notes joined to the last user turn (or a new user turn after
    an assistant turn), each fenced apart from anything a customer wrote.

    A plain function because the model step applies it to the messages it sends (on runs
    that take notes inside the step) and the loop applies it to its own conversation after:
    both must come to the same messages.
    """
    blocks = [
        {"type": "text", "text": GUIDANCE.format(author=n.author) + fence.wrap(n.body, token)}
        for n in notes
    ]
    if not blocks:
        return messages
    last = messages[-1]
    if last["role"] == "user":
        return [*messages[:-1], {**last, "content": [*last["content"], *blocks]}]
    return [*messages, {"role": "user", "content": blocks}]


class Conversation:
    """The messages one run's model is handed, and the only code that knows their shape."""

    def __init__(self, prompt: str, token: str, fence_in_turn: bool = False) -> None:
        """``fence_in_turn``: the run's fence token opens the first user turn (the system
        prompt then names no token); runs started before that keep it in the system prompt."""
        self.token = token
        opening = [{"type": "text", "text": prompt}]
        if fence_in_turn:
            opening.insert(0, {"type": "text", "text": fence_notice(token)})
        self.messages: list[Message] = [{"role": "user", "content": opening}]

    def result(self, call: Mapping[str, Any], text: str, ok: bool) -> dict[str, Any]:
        """A tool call's answer as the model reads it: fenced, an error when it failed."""
        return {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": fence.wrap(text, self.token),
            "is_error": not ok,
        }

    def denial(self, call: Mapping[str, Any], reason: str | None) -> dict[str, Any]:
        return self.result(call, DENIAL_TEXT.format(reason=reason or "(no reason given)"), False)

    def guidance(self, notes: Iterable[Note]) -> None:
        """Staff notes join the last user turn (or open one after an assistant turn)."""
        self.messages[:] = with_guidance(self.messages, notes, self.token)

    def reply(self, content: list[dict[str, Any]]) -> None:
        """The model's reply; after a ``pause_turn`` it continues the same assistant turn.

        A tool call the API itself would refuse to be sent back (no name, a name outside
        ``^[a-zA-Z0-9_-]{1,64}$``, an input that is not an object) goes back named
        ``INVALID_TOOL`` with an empty input: it was answered with an error, and the history
        must stay one the API accepts.
        """
        content = [_sendable(b) for b in content]
        last = self.messages[-1]
        if last["role"] == "assistant":
            self.messages[-1] = {**last, "content": [*last["content"], *content]}
        elif content:
            self.messages.append({"role": "assistant", "content": content})

    def finish_briefly(self) -> None:
        """After a reply cut off by ``max_tokens``: ask for a short finish in the user turn."""
        block = {"type": "text", "text": FINISH_BRIEFLY}
        last = self.messages[-1]
        if last["role"] == "user":
            self.messages[-1] = {**last, "content": [*last["content"], block]}
        else:
            self.messages.append({"role": "user", "content": [block]})

    def results(self, blocks: list[dict[str, Any]]) -> None:
        """One turn's tool results, as one user turn."""
        if blocks:
            self.messages.append({"role": "user", "content": blocks})


def tool_uses(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
