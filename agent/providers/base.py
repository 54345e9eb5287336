"""What the loop needs from a model: one call in, one reply out.

Replies are plain data (``to_dict``/``from_dict``) because they are DBOS step
outputs, checkpointed as portable JSON and replayed after a crash.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True, slots=True)
class ModelReply:
    # Anthropic-style content blocks: {"type": "text", "text": ...} and
    # {"type": "tool_use", "id": ..., "name": ..., "input": {...}}.
    content: list[dict[str, Any]]
    stop_reason: str
    input_tokens: int
    output_tokens: int
    cost_micros: int
    provider: str
    model: str
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_ms: int = 0

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text").strip()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelReply:
        return cls(**data)


class Provider(Protocol):
    name: str
    model: str

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """One model call. Raises on transport failure; never retries a completed call."""
        ...
