"""What the loop needs from a model: one call in, one reply out.

Replies are plain data (``to_dict``) because they are DBOS step outputs,
checkpointed as portable JSON and replayed after a crash.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any, Protocol

# Set by the model step when its runtime can sleep durably (agent.run.turns): a wait the API
# asks for (``retry-after``) is then handed back at once as a ``ProviderError`` with
# ``retry_after`` set, instead of being slept inside the step with a worker thread held.
return_waits: contextvars.ContextVar[bool] = contextvars.ContextVar("return_waits", default=False)


class ProviderError(Exception):
    """A model call that did not produce a reply.

    ``kind`` is the API's error type (``invalid_request_error``, ``overloaded_error``…)
    or ``connection_error`` / ``timeout`` when no answer came; ``transient`` says whether a
    later attempt could succeed (it is still set after the retry budget is spent).
    """

    def __init__(
        self,
        *,
        kind: str,
        message: str,
        transient: bool,
        status: int | None = None,
        attempts: int = 1,
        retry_after: float | None = None,
        request_id: str | None = None,
        history: tuple[str, ...] = (),
    ) -> None:
        super().__init__(kind, message)
        self.kind, self.message, self.transient = kind, message, transient
        self.status, self.attempts, self.retry_after = status, attempts, retry_after
        self.request_id, self.history = request_id, history

    @property
    def permanent(self) -> bool:
        return not self.transient

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status else ""
        text = f"Anthropic API {self.kind}{where}: {self.message}"
        if self.attempts > 1:
            text += f" [gave up after {self.attempts} attempts: {', '.join(self.history)}]"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only __init__: rebuild from the fields so the error survives pickling.
        fields = {
            k: getattr(self, k)
            for k in (
                "kind",
                "message",
                "transient",
                "status",
                "attempts",
                "retry_after",
                "request_id",
                "history",
            )
        }
        return (_rebuild, (fields,))


def _rebuild(fields: dict[str, Any]) -> ProviderError:
    return ProviderError(**fields)


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


class Provider(Protocol):
    name: str
    model: str

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        """One model call. Raises on transport failure; never retries a completed call."""
        ...
