"""Keyless providers' common ground, and an explicit script for tests.

Both ``ScriptedProvider`` here and the policy reader in ``policy.py`` are
stateless: each call re-derives its turn from the message history alone, so a
replayed or recovered run gets the same reply for the same history. Their
usage is reported from settings so run accounting is exercised without a key.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings

from agent.providers.base import ModelReply

MARK = "[scripted provider]"
POLICY_MODEL = "scripted-policy-1"


def call(name: str, **args: Any) -> dict[str, Any]:
    """A tool_use block for a script; its id is assigned when the turn is played."""
    return {"type": "tool_use", "name": name, "input": args}


def say(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _assistant_turns(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


class _Reporting:
    """Reported usage, so run accounting is exercised without a key."""

    name = "scripted"
    model = POLICY_MODEL

    def __init__(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_micros: int | None = None,
    ) -> None:
        self._input_tokens = input_tokens
        self._output_tokens = output_tokens
        self._cost_micros = cost_micros

    def _reply(self, content: list[dict[str, Any]]) -> ModelReply:
        default_in, default_out = settings.DESKHAND_SCRIPTED_TOKENS
        cost = self._cost_micros
        return ModelReply(
            content=content,
            stop_reason="tool_use"
            if any(b.get("type") == "tool_use" for b in content)
            else "end_turn",
            input_tokens=default_in if self._input_tokens is None else self._input_tokens,
            output_tokens=default_out if self._output_tokens is None else self._output_tokens,
            cost_micros=settings.DESKHAND_SCRIPTED_COST_MICROS if cost is None else cost,
            provider=self.name,
            model=self.model,
        )


class ScriptedProvider(_Reporting):
    """Plays an explicit script: turn N answers a history holding N assistant messages.

    A turn is a list of blocks (built with ``call``/``say``), a ``ModelReply``
    returned as is (to script a refusal or ``max_tokens``), or an exception
    instance, raised (to script a failing model call). Past the end of the
    script it says it is done.
    """

    def __init__(
        self,
        turns: list[Any],
        *,
        model: str = "scripted-test",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_micros: int | None = None,
    ) -> None:
        super().__init__(
            input_tokens=input_tokens, output_tokens=output_tokens, cost_micros=cost_micros
        )
        self.turns = turns
        self.model = model
        # Which turns were asked for, in order: for tests to inspect, never for decisions.
        self.calls: list[int] = []

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        turn = _assistant_turns(messages)
        self.calls.append(turn)
        if turn >= len(self.turns):
            return self._reply([say(f"{MARK} The script is finished; nothing further to do.")])
        scripted = self.turns[turn]
        if isinstance(scripted, BaseException):
            raise scripted
        if isinstance(scripted, ModelReply):
            return scripted
        content = copy.deepcopy(list(scripted))
        for i, block in enumerate(content):
            if block.get("type") == "tool_use":
                block.setdefault("id", f"toolu_scripted_{turn}_{i}")
        return self._reply(content)
