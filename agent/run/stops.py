"""How the loop ends a run: ``Stop``, and the replies that end it before anything is acted on.

The loop (``agent.loop``) raises a ``Stop`` wherever a run must end — a bound, a verdict, a
reply it must not act on — and its one ``run.finish`` step writes that ending. The rules for
a reply live here so the loop reads as its flow: ``unacted`` is checked before the reply's
words count as the model's account, ``overflowed`` after.
"""

from __future__ import annotations

from agent.conversation.live import KNOWN_STOP_REASONS
from agent.models import RunStatus, StopReason


class Stop(Exception):
    """End the run now with this status and reason."""

    def __init__(self, status: str, reason: str, detail: str = "") -> None:
        super().__init__(f"{status}: {reason} {detail}")
        self.status, self.reason, self.detail = status, reason, detail


def closed_quietly(status: str) -> Stop:
    """The run was closed (or is being cancelled) by someone else: end without a word of our own.

    ``run.finish`` still runs (the step sequence stays the same) but writes nothing on a
    run that is no longer open or is being cancelled, so whoever closed it keeps the last word.
    """
    return Stop(
        status, "cancelled" if status in (RunStatus.CANCELLING, RunStatus.CANCELLED) else "closed"
    )


def unacted(stop_reason: str) -> Stop | None:
    """A reply nothing of which may be acted on: a stop reason Deskhand does not know (whether
    the reply is complete, or its calls meant to be run, is unknown), or a refusal."""
    if stop_reason not in KNOWN_STOP_REASONS:
        return Stop(
            RunStatus.FAILED,
            StopReason.UNKNOWN_STOP_REASON,
            f"the model stopped for a reason Deskhand does not know "
            f"({stop_reason or 'none given'}); nothing in that reply was acted on",
        )
    if stop_reason == "refusal":
        return Stop(RunStatus.FAILED, "model_refusal", "the model refused to continue")
    return None


def overflowed(stop_reason: str, truncations: int) -> Stop | None:
    """A conversation that no longer fits the context window, or a second reply cut off by
    the output limit (``truncations`` counts this one)."""
    if stop_reason == "model_context_window_exceeded":
        return Stop(
            RunStatus.EXHAUSTED,
            StopReason.CONTEXT_WINDOW_EXCEEDED,
            "the conversation no longer fits the model's context window",
        )
    if stop_reason == "max_tokens" and truncations > 1:
        return Stop(
            RunStatus.EXHAUSTED,
            StopReason.TRUNCATED,
            "the model's reply was cut off by its output limit twice",
        )
    return None
