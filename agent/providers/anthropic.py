"""Claude through the Messages API.

The request is the same shape every turn — one cached system block, the
strict tool schemas in a fixed order, the history — so the prompt cache stays
warm across a run. Transport retries are the SDK's (two, with backoff), which
is safe because a model call has no effect outside itself; the loop records
the reply as a step, so a completed call is never made twice.
"""

from __future__ import annotations

import time
from typing import Any

import anthropic

from agent.providers import pricing
from agent.providers.base import ModelReply

# Blocks the loop keeps; thinking blocks go back to the API verbatim on the next turn.
KEPT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 60,
    ) -> None:
        # Priced up front: a model we cannot cost must fail before it spends anything.
        pricing.rates(model)
        self.model = model
        self.max_tokens = max_tokens
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=2, timeout=timeout
        )

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages,
        }
        if tools:
            request["tools"] = tools
        started = time.monotonic()
        response = self._client.messages.create(**request)
        latency_ms = int((time.monotonic() - started) * 1000)

        usage = response.usage
        input_tokens = usage.input_tokens or 0
        output_tokens = usage.output_tokens or 0
        cache_read = usage.cache_read_input_tokens or 0
        cache_write = usage.cache_creation_input_tokens or 0
        return ModelReply(
            content=[
                block.model_dump(exclude_none=True)
                for block in response.content
                if block.type in KEPT_BLOCKS
            ],
            # "refusal" passes through: the loop ends the run as a model refusal.
            stop_reason=response.stop_reason or "end_turn",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_micros=pricing.cost_micros(
                self.model, input_tokens, output_tokens, cache_read, cache_write
            ),
            provider=self.name,
            model=self.model,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            latency_ms=latency_ms,
        )
