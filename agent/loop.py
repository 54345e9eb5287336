"""The agent loop. It knows the runtime protocol, the registry and the steps — not DBOS.

The conversation is a local ``agent.conversation.live.Conversation`` rebuilt, on
replay, from checkpointed step outputs; the loop body itself reads nothing else
(no clock, no database, no randomness), so a resumed run walks the same path up
to the step that was in flight and continues from there. Every message it sends
is built through that class — the same code that rebuilds a run's messages from
its step log for replay, forks and the console (``agent.replay.rebuild``).

A turn is one durable step (``agent.run.turns.turn``: staff notes, the bounds check and
the model call). Runs recorded before that took four; they still finish, through
``agent.run.legacy_turns``, the one place the older path lives.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.consent.gate import gate_open, gate_read, gate_request, gate_resume, gate_settle
from agent.conversation.live import (
    KNOWN_STOP_REASONS,
    NOT_RUN_STEP_CAP,
    Conversation,
    tool_uses,
    unrunnable,
)
from agent.customer.wait import (
    ASK_TOOL,
    customer_park,
    customer_read,
    customer_repark,
    customer_resume,
    reminder_call,
)
from agent.ledger.effect import execute_irreversible, ledger_lookup
from agent.models import RunStatus, StopReason
from agent.run.legacy_turns import LegacyTurns
from agent.run.lifecycle import run_begin, run_finish
from agent.run.turns import turn
from agent.runtime import Patch, Runtime, StepName, tool_step
from agent.tools import REGISTRY, Risk
from agent.tools.execute import execute_tool, validate_call


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


class Loop:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.run_id = rt.run_id
        self.seq = 1
        self.token = ""
        self.system_token = ""
        self.last_text = ""
        self.conversation = Conversation("", "")
        self.truncations = 0
        self.unknown_stop_ends = True
        self.legacy: LegacyTurns | None = None
        self.two_step_gate = False

    def next_seq(self) -> int:
        """The step-log number the next row of this run takes."""
        seq = self.seq
        self.seq += 1
        return seq

    async def run(self) -> dict[str, Any]:
        begin = await self.rt.step(StepName.BEGIN, run_begin, self.run_id)
        if begin["status"] not in (
            RunStatus.RUNNING,
            RunStatus.AWAITING_APPROVAL,
            RunStatus.AWAITING_CUSTOMER,
        ):
            return {"status": begin["status"]}
        self.token = begin["fence_token"]
        self.seq = begin["next_seq"]
        # Two operations an approval (``_gated``), and so one a turn too (agent.run.turns.turn).
        # A run recorded before that finds another checkpoint here and walks the older gate;
        # one recorded before one-step turns walks the older turns too (agent.run.legacy_turns).
        self.two_step_gate = await self.rt.patch(Patch.TWO_STEP_GATE)
        if not self.two_step_gate and not await self.rt.patch(Patch.ONE_STEP_TURNS):
            self.legacy = await LegacyTurns.taken(self.rt)
        fence_in_turn = self.legacy is None or self.legacy.fence_in_turn
        self.unknown_stop_ends = self.legacy is None or self.legacy.unknown_stop_ends
        # The fence token opens the first user turn, so every run shares one cached
        # tools + system prefix (older runs named it in the system prompt).
        self.system_token = "" if fence_in_turn else self.token
        conversation = self.conversation = Conversation(begin["prompt"], self.token, fence_in_turn)
        try:
            while True:
                hit, reply = await self._turn()
                if hit and hit.get("reason"):
                    raise Stop(RunStatus.EXHAUSTED, hit["reason"], hit["detail"])
                # Older checkpoints of the bounds check hold None: no per-call count then.
                steps_left = hit.get("steps_left") if hit else None
                assert reply is not None  # a turn without a reply is one that hit a bound
                if "provider_error" in reply:
                    # No reply and no step row: the run's closing row takes the model's number.
                    raise Stop(RunStatus.FAILED, StopReason.PROVIDER_ERROR, reply["provider_error"])
                content, stop_reason = reply["content"], reply["stop_reason"]
                text = "\n".join(
                    b.get("text", "") for b in content if b.get("type") == "text"
                ).strip()
                if self.unknown_stop_ends and stop_reason not in KNOWN_STOP_REASONS:
                    # Whether the reply is complete, or its calls meant to be run, is unknown.
                    raise Stop(
                        RunStatus.FAILED,
                        StopReason.UNKNOWN_STOP_REASON,
                        f"the model stopped for a reason Deskhand does not know "
                        f"({stop_reason or 'none given'}); nothing in that reply was acted on",
                    )
                if stop_reason == "refusal":
                    raise Stop(RunStatus.FAILED, "model_refusal", "the model refused to continue")
                self.last_text = text or self.last_text
                if stop_reason == "model_context_window_exceeded":
                    raise Stop(
                        RunStatus.EXHAUSTED,
                        StopReason.CONTEXT_WINDOW_EXCEEDED,
                        "the conversation no longer fits the model's context window",
                    )
                if stop_reason == "max_tokens":
                    self.truncations += 1
                    if self.truncations > 1:
                        raise Stop(
                            RunStatus.EXHAUSTED,
                            StopReason.TRUNCATED,
                            "the model's reply was cut off by its output limit twice",
                        )
                calls = tool_uses(content)
                conversation.reply(content)
                if not calls and stop_reason not in ("max_tokens", "pause_turn"):
                    return await self._finish(RunStatus.SUCCEEDED, "end_turn", "")
                # The model call itself is one step; each tool call run is at least one more.
                budget = None if steps_left is None else steps_left - 1
                results = []
                for call in calls:
                    why = unrunnable(call, content, stop_reason)
                    if why:
                        results.append(self._result(call, why, False))
                    elif budget is not None and budget <= 0:
                        results.append(self._result(call, NOT_RUN_STEP_CAP, False))
                    else:
                        results.append(await self._settle(call))
                        budget = None if budget is None else budget - 1
                conversation.results(results)
                if stop_reason == "max_tokens":
                    conversation.finish_briefly()
        except Stop as stop:
            return await self._finish(stop.status, stop.reason, stop.detail)

    async def _turn(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """One turn as one step (agent.run.turns.turn): the bounds answer and the reply
        (``None`` when a bound was hit). The notes it took join this conversation exactly as
        they joined the messages it sent; a wait the API names is slept here, durably, and
        the turn asked again (its notes are already taken, so the new call finds only newer
        ones)."""
        if self.legacy is not None:
            return await self.legacy.turn(self)
        spent: dict[str, Any] = {"attempts": 0, "waited": 0.0}
        while True:
            out = await self.rt.limited_step(
                StepName.MODEL,
                turn,
                self.run_id,
                self.seq,
                self.conversation.messages,
                self.system_token,
                self.token,
                spent,
            )
            self.conversation.guidance(out["notes"])
            self.seq = out["next_seq"]
            reply: dict[str, Any] | None = out.get("reply")
            if reply is None or "wait" not in reply:
                return out["bounds"], reply
            wait = reply["wait"]
            spent = {"attempts": wait["attempts"], "waited": wait["waited"]}
            await self.rt.sleep(wait["seconds"])

    async def _finish(self, status: str, reason: str, detail: str) -> dict[str, Any]:
        return await self.rt.step(
            StepName.FINISH,
            run_finish,
            self.run_id,
            self.next_seq(),
            status,
            reason,
            detail,
            self.last_text,
        )

    def _result(self, call: dict[str, Any], text: str, ok: bool) -> dict[str, Any]:
        return self.conversation.result(call, text, ok)

    async def _settle(self, call: dict[str, Any]) -> dict[str, Any]:
        tool = REGISTRY.get(call.get("name", ""))
        error, _ = validate_call(call.get("name", ""), call.get("input"))
        if tool is None or error is not None or tool.risk is not Risk.IRREVERSIBLE:
            out = await self.rt.step(
                tool_step(call.get("name", "?")), execute_tool, self.run_id, self.next_seq(), call
            )
            if out.get("stop") in ("cancelled", "closed"):
                raise closed_quietly(out["status"])
            return self._result(call, out["text"], out["ok"])
        return await self._gated(call)

    async def _gated(self, call: dict[str, Any]) -> dict[str, Any]:
        """An irreversible call: ledger first, then a person, then exactly one execution.

        Two steps around the wait (``Patch.TWO_STEP_GATE``): ``gate.request`` asks the
        ledger, opens the approval and says where the decision stands; ``gate.resume``
        reads it after each wake and, once decided or expired, settles it. Runs recorded
        before take five operations to the wait and four after it (``_gated_in_steps``).
        """
        if not self.two_step_gate:
            return await self._gated_in_steps(call)
        opened = await self.rt.step(StepName.GATE_REQUEST, gate_open, self.run_id, self.seq, call)
        if "done" in opened:
            # Already performed (by the run this one was forked from, say): no row was written.
            return self._result(call, opened["done"]["text"], opened["done"]["ok"])
        self.seq += 1  # the request's row (or its refusal's) took it
        refused = self._unasked(call, opened)
        if refused is not None:
            return refused
        approval_id, seq = opened["approval_id"], self.next_seq()
        # A merchant's rule may have decided already: then the resume reads it at once.
        pending, expires_at = opened["status"] == "pending", opened["expires_at"]
        while True:
            if pending:
                # Until the stored expires_at, so a restart never extends the wait.
                await self.rt.wait(opened["topic"], dt.datetime.fromisoformat(expires_at))
            verdict = await self.rt.step(
                StepName.GATE_RESUME, gate_settle, self.run_id, seq, call, approval_id
            )
            if verdict["verdict"] != "pending":
                return await self._act(call, approval_id, verdict)
            # The wake was no decision: wait again, until the expiry the row holds now.
            pending, expires_at = True, verdict["expires_at"]

    def _unasked(self, call: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
        """The request's output when nobody is asked: the result the model reads, or the end
        of the run; ``None`` when the run waits for the decision."""
        if request.get("closed"):
            raise closed_quietly(request["closed"])
        if request.get("refused"):
            # The pre-check refused it (money that cannot move, a reply with nothing new for
            # the customer): no approval; the model reads why.
            return self._result(call, request["refused"], False)
        if request.get("mismatch"):
            # A re-derived call under an existing approval: refuse now rather than ask a
            # person to decide something that could only fail at resume.
            raise Stop(RunStatus.FAILED, "approval_mismatch", request["mismatch"])
        return None

    async def _gated_in_steps(self, call: dict[str, Any]) -> dict[str, Any]:
        """The gate as runs recorded before ``Patch.TWO_STEP_GATE`` walk it."""
        done = await self.rt.step(StepName.LEDGER_LOOKUP, ledger_lookup, self.run_id, call)
        if done is not None:
            if not done["same_args"]:
                raise Stop(
                    RunStatus.FAILED,
                    "ledger_mismatch",
                    f"ledger key {done['key']} holds different arguments",
                )
            # Already performed (e.g. by the run this one was forked from): do not ask or act again.
            return self._result(call, done["text"], done["ok"])
        request = await self.rt.step(
            StepName.GATE_REQUEST, gate_request, self.run_id, self.next_seq(), call
        )
        refused = self._unasked(call, request)
        if refused is not None:
            return refused
        approval_id = request["approval_id"]
        expires_at = dt.datetime.fromisoformat(request["expires_at"])
        waited_from = await self.rt.now()
        while True:
            decision = await self.rt.step(StepName.GATE_READ, gate_read, approval_id)
            if decision["status"] != "pending":
                break
            now = await self.rt.now()
            remaining = (expires_at - now).total_seconds()
            if remaining <= 0:
                break
            # Until the stored expires_at, so a restart never extends the wait.
            await self.rt.wait(request["topic"], expires_at)
        waited = (await self.rt.now() - waited_from).total_seconds()
        verdict = await self.rt.step(
            StepName.GATE_RESUME,
            gate_resume,
            self.run_id,
            self.next_seq(),
            call,
            approval_id,
            waited,
        )
        return await self._act(call, approval_id, verdict)

    async def _act(
        self, call: dict[str, Any], approval_id: str, verdict: dict[str, Any]
    ) -> dict[str, Any]:
        """After the gate's resume: the verdict's end, or exactly one execution."""
        if verdict["verdict"] == "closed":
            raise closed_quietly(verdict["status"])
        if verdict["verdict"] == "expired":
            raise Stop(
                RunStatus.FAILED,
                "approval_expired",
                f"nobody decided on {call['name']} before the approval expired",
            )
        if verdict["verdict"] == "mismatch":
            raise Stop(RunStatus.FAILED, "approval_mismatch", verdict["detail"])
        if verdict["verdict"] == "denied":
            return self.conversation.denial(call, verdict.get("reason"))
        out = await self.rt.step(
            tool_step(call["name"]),
            execute_irreversible,
            self.run_id,
            self.next_seq(),
            call,
            approval_id,
        )
        if out.get("stop") in ("cancelled", "closed"):
            raise closed_quietly(out["status"])
        if "stop" in out:
            raise Stop(RunStatus.FAILED, out["stop"], out["detail"])
        # Also when the ask's step ran again after a crash (its answer then comes from the
        # ledger: the question went out once) — the run still waits for the customer.
        if call["name"] == ASK_TOOL and out["ok"]:
            return await self._await_customer(call)
        return self._result(call, out["text"], out["ok"])

    async def _await_customer(self, call: dict[str, Any]) -> dict[str, Any]:
        """The question went out: park until the customer answers or the reply window ends.

        The approval gate's shape (agent.customer.wait): a message on the ticket's topic only
        wakes the run; what the customer wrote is read from the thread, in a step.
        """
        park = await self.rt.step(StepName.CUSTOMER_PARK, customer_park, self.run_id, call)
        if park.get("closed"):
            raise closed_quietly(park["closed"])
        until = dt.datetime.fromisoformat(park["until"])
        # One reminder when the merchant wants it (runs parked before it wait as they did).
        remind_at = park.get("remind_at")
        if remind_at is not None and not await self.rt.patch(Patch.CUSTOMER_REMINDER):
            remind_at = None
        while True:
            due = [remind_at] if remind_at is not None else []
            seen = await self.rt.step(
                StepName.CUSTOMER_READ,
                customer_read,
                self.run_id,
                park["after"],
                park["until"],
                *due,
            )
            if seen["answered"] or seen["passed"]:
                break
            if seen.get("remind"):
                # Once: a reply of the run's own, gated and claimed like any (its refusal,
                # at the daily cap say, is recorded and the wait goes on).
                remind_at = None
                await self._gated(reminder_call(call))
                again = await self.rt.step(
                    StepName.CUSTOMER_REPARK, customer_repark, self.run_id, park["until"]
                )
                if again.get("closed"):
                    raise closed_quietly(again["closed"])
                continue
            await self.rt.wait(
                park["topic"], dt.datetime.fromisoformat(remind_at) if remind_at else until
            )
        verdict = await self.rt.step(
            StepName.CUSTOMER_RESUME,
            customer_resume,
            self.run_id,
            self.next_seq(),
            call,
            park,
            seen["answered"],
        )
        if verdict["verdict"] == "closed":
            raise closed_quietly(verdict["status"])
        if verdict["verdict"] == "no_reply":
            raise Stop(RunStatus.EXHAUSTED, StopReason.CUSTOMER_NO_REPLY, verdict["detail"])
        return self._result(call, verdict["text"], True)


async def run_agent(rt: Runtime) -> dict[str, Any]:
    return await Loop(rt).run()
