"""The path through a turn that runs recorded before ``one-step-turns`` still take.

Since ``Patch.ONE_STEP_TURNS`` a turn is one durable step (``agent.run.turns.turn``). A
run that was already past that point when the patch shipped — parked at its approval gate,
say — replays the sequence it recorded: per turn a drain of staff notes from the ``steer``
topic (``DBOS.recv`` and its ``DBOS.sleep``, then ``notes.record`` if any came),
``bounds.check``, then ``model`` — the call alone, through the rate limit only if the run
took ``model-calls-rate-limited``. Three older patches decide the rest of its shape, read
here in the order they were recorded.

This module is the only place the older path lives, so it can go in one commit.
**Retiring it**: once ``manage.py health`` reports no run on it (``legacy_turn_runs``:
open runs whose history holds a ``bounds.check``), delete this module, the loop's one
``if self.legacy``, and turn the loop's ``patch(ONE_STEP_TURNS)`` into
``deprecate_patch`` for one release (a run then still finds its marker); after that
release the call goes too (docs/deploys.md, "Retiring a patch").
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.conversation.live import Conversation
from agent.run.bounds import bounds_step
from agent.run.steering import notes_record
from agent.run.turns import model_turn
from agent.runtime import Patch, Runtime, StepName
from deskhand.dbos.names import STEER_TOPIC


class TurnHost(Protocol):
    """What of the loop an older turn uses (``agent.loop.Loop``)."""

    rt: Runtime
    run_id: str
    seq: int
    conversation: Conversation
    system_token: str

    def next_seq(self) -> int: ...


class LegacyTurns:
    """How a run recorded before one-step turns takes each turn, from its own patches."""

    def __init__(
        self, *, fence_in_turn: bool, unknown_stop_ends: bool, limited_model: bool
    ) -> None:
        self.fence_in_turn = fence_in_turn
        self.unknown_stop_ends = unknown_stop_ends
        self.limited_model = limited_model

    @classmethod
    async def taken(cls, rt: Runtime) -> LegacyTurns:
        """Ask the older patches in the order such a run recorded them."""
        # The fence token moved out of the system prompt into the opening turn.
        fence_in_turn = await rt.patch(Patch.FENCE_IN_OPENING_TURN)
        # A stop reason the loop does not know ends the run (runs already past this point
        # kept going on one: their histories replay as recorded).
        unknown_stop_ends = await rt.patch(Patch.UNKNOWN_STOP_REASON_ENDS_RUN)
        # Model calls go through the runtime's rate limit, and a wait the API names is
        # slept durably between calls (runs already past this point call the plain step).
        limited_model = await rt.patch(Patch.MODEL_CALLS_RATE_LIMITED)
        return cls(
            fence_in_turn=fence_in_turn,
            unknown_stop_ends=unknown_stop_ends,
            limited_model=limited_model,
        )

    async def turn(self, loop: TurnHost) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Notes, then ``bounds.check``, then the call: the bounds answer and the reply
        (``None`` when a bound was hit, before any call)."""
        # Staff guidance joins the last user turn (the prompt or tool results).
        loop.conversation.guidance(await self._staff_guidance(loop))
        hit: dict[str, Any] | None = await loop.rt.step(
            StepName.BOUNDS_CHECK, bounds_step, loop.run_id
        )
        if hit and hit.get("reason"):
            return hit, None
        seq = loop.next_seq()
        reply = await self._model(loop, seq)
        if "provider_error" in reply:
            loop.seq = seq  # no row was written: the closing row takes this number
        return hit, reply

    async def _model(self, loop: TurnHost, seq: int) -> dict[str, Any]:
        """One model call. On the rate-limited path the call waits its turn across workers,
        and a wait the API asks for comes back from the step (never slept inside it) to be
        slept here durably, then the call is made again (agent.run.turns)."""
        args = (loop.run_id, seq, loop.conversation.messages, loop.system_token)
        if not self.limited_model:
            return await loop.rt.step(StepName.MODEL, model_turn, *args)
        spent: dict[str, Any] = {"attempts": 0, "waited": 0.0}
        while True:
            reply = await loop.rt.limited_step(StepName.MODEL, model_turn, *args, spent)
            wait = reply.get("wait")
            if wait is None:
                return reply
            spent = {"attempts": wait["attempts"], "waited": wait["waited"]}
            await loop.rt.sleep(wait["seconds"])

    async def _staff_guidance(self, loop: TurnHost) -> list[dict[str, Any]]:
        """The notes that reached the run since the last turn (author and body), recorded."""
        notes = await loop.rt.drain(STEER_TOPIC)
        if not notes:
            return []
        recorded: list[dict[str, Any]] = await loop.rt.step(
            StepName.NOTES_RECORD, notes_record, loop.run_id, loop.next_seq(), notes
        )
        return recorded
