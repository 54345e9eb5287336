"""The agent loop. It knows the runtime protocol, the registry and the steps — not DBOS.

The conversation is a local ``agent.conversation.live.Conversation`` rebuilt, on
replay, from checkpointed step outputs; the loop body itself reads nothing else
(no clock, no database, no randomness), so a resumed run walks the same path up
to the step that was in flight and continues from there. Every message it sends
is built through that class — the same code that rebuilds a run's messages from
its step log for replay, forks and the console (``agent.replay.rebuild``).

Each step's output is a small type (``agent.steps``) the loop reads by field. A turn is
one durable step (``agent.run.turns.turn``: staff notes, the bounds check and the model
call); an approval is two around its wait (``gate.request``, ``gate.resume``).
"""

from __future__ import annotations

import datetime as dt

from agent.consent.gate import gate_request, gate_settle
from agent.conversation.live import (
    NOT_RUN_STEP_CAP,
    Call,
    Conversation,
    Result,
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
from agent.ledger.effect import execute_irreversible
from agent.models import RunStatus, StopReason
from agent.record.execute import execute_tool, validate_call
from agent.run.lifecycle import run_begin, run_finish
from agent.run.stops import Stop, closed_quietly, overflowed, unacted
from agent.run.turns import turn
from agent.runtime import Runtime, StepName, tool_step
from agent.steps import Finished, Turn, Verdict
from agent.tools import REGISTRY, Risk

GOES_ON = (RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_CUSTOMER)


class Loop:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.run_id = rt.run_id
        self.seq = 1
        self.token = ""
        self.last_text = ""
        self.conversation = Conversation("", "")
        self.truncations = 0

    def next_seq(self) -> int:
        """The step-log number the next row of this run takes."""
        seq = self.seq
        self.seq += 1
        return seq

    async def run(self) -> Finished:
        begun = await self.rt.step(StepName.BEGIN, run_begin, self.run_id)
        if begun.status not in GOES_ON:
            return Finished(begun.status)
        self.token, self.seq = begun.fence_token, begun.next_seq
        # The fence token opens the first user turn, so every run shares one cached
        # tools + system prefix.
        self.conversation = Conversation(begun.prompt, self.token, fence_in_turn=True)
        try:
            while True:
                await self._turn()
        except Stop as stop:
            end = (self.next_seq(), stop.status, stop.reason, stop.detail, self.last_text)
            return await self.rt.step(StepName.FINISH, run_finish, self.run_id, *end)

    async def _turn(self) -> None:
        """One model turn and the tool calls it asked for; ``Stop`` when the run ends."""
        out = await self._ask()
        if out.bounds.reason:
            raise Stop(RunStatus.EXHAUSTED, out.bounds.reason, out.bounds.detail)
        reply = out.reply
        assert reply is not None  # a turn without a reply is one that hit a bound
        if reply.provider_error:
            # No reply and no step row: the run's closing row takes the model's number.
            raise Stop(RunStatus.FAILED, StopReason.PROVIDER_ERROR, reply.provider_error)
        stop = unacted(reply.stop_reason)
        if stop is not None:
            raise stop
        text = "\n".join(b.get("text", "") for b in reply.content if b.get("type") == "text")
        self.last_text = text.strip() or self.last_text
        self.truncations += reply.stop_reason == "max_tokens"
        stop = overflowed(reply.stop_reason, self.truncations)
        if stop is not None:
            raise stop
        calls = tool_uses(reply.content)
        self.conversation.reply(reply.content)
        if not calls and reply.stop_reason not in ("max_tokens", "pause_turn"):
            raise Stop(RunStatus.SUCCEEDED, "end_turn")
        # The model call itself is one step; each tool call run is at least one more.
        left = out.bounds.steps_left
        budget = None if left is None else left - 1
        results = []
        for call in calls:
            why = unrunnable(call, reply.content, reply.stop_reason)
            if why:
                results.append(self.conversation.result(call, why, False))
            elif budget is not None and budget <= 0:
                results.append(self.conversation.result(call, NOT_RUN_STEP_CAP, False))
            else:
                results.append(await self._settle(call))
                budget = None if budget is None else budget - 1
        self.conversation.results(results)
        if reply.stop_reason == "max_tokens":
            self.conversation.finish_briefly()

    async def _ask(self) -> Turn:
        """One turn as one step (agent.run.turns.turn). The notes it took join this
        conversation exactly as they joined the messages it sent; a wait the API names is
        slept here, durably, and the turn asked again (its notes are already taken, so the
        new call finds only newer ones)."""
        attempts, waited = 0, 0.0
        while True:
            args = (self.run_id, self.seq, self.conversation.messages, "", self.token)
            spent = {"attempts": attempts, "waited": waited}
            out = await self.rt.limited_step(StepName.MODEL, turn, *args, spent)
            self.conversation.guidance(out.notes)
            self.seq = out.next_seq
            wait = out.reply.wait if out.reply else None
            if wait is None:
                return out
            attempts, waited = wait.attempts, wait.waited
            await self.rt.sleep(wait.seconds)

    async def _settle(self, call: Call) -> Result:
        tool = REGISTRY.get(call.get("name", ""))
        error, _ = validate_call(call.get("name", ""), call.get("input"))
        if tool is None or error is not None or tool.risk is not Risk.IRREVERSIBLE:
            step = tool_step(call.get("name", "?"))
            out = await self.rt.step(step, execute_tool, self.run_id, self.next_seq(), call)
            if out.closed:
                raise closed_quietly(out.status)
            return self.conversation.result(call, out.text, out.ok)
        return await self._gated(call)

    async def _gated(self, call: Call) -> Result:
        """An irreversible call: ledger first, then a person, then exactly one execution.

        ``gate.request`` asks the ledger, opens the approval and says where the decision
        stands; ``gate.resume`` reads it after each wake and, once decided or expired,
        settles it.
        """
        opened = await self.rt.step(
            StepName.GATE_REQUEST, gate_request, self.run_id, self.seq, call
        )
        if opened.done is not None:
            # Already performed (by the run this one was forked from, say): no row was written.
            return self.conversation.result(call, opened.done.text, opened.done.ok)
        self.seq += 1  # the request's row (or its refusal's) took it
        if opened.closed:
            raise closed_quietly(opened.closed)
        if opened.refused:
            # The pre-check refused it (money that cannot move, a reply with nothing new for
            # the customer): no approval; the model reads why.
            return self.conversation.result(call, opened.refused, False)
        if opened.mismatch:
            # A re-derived call under an existing approval: refuse now rather than ask a
            # person to decide something that could only fail at resume.
            raise Stop(RunStatus.FAILED, "approval_mismatch", opened.mismatch)
        seq = self.next_seq()
        # A merchant's rule may have decided already: then the resume reads it at once.
        verdict = Verdict("pending", expires_at=opened.expires_at)
        pending = opened.status == "pending"
        while verdict.verdict == "pending":
            if pending:
                # Until the stored expires_at, so a restart never extends the wait.
                await self.rt.wait(opened.topic, dt.datetime.fromisoformat(verdict.expires_at))
            verdict = await self.rt.step(
                StepName.GATE_RESUME, gate_settle, self.run_id, seq, call, opened.approval_id
            )
            pending = True  # a wake that was no decision: wait again, until the row's expiry
        return await self._act(call, opened.approval_id, verdict)

    async def _act(self, call: Call, approval_id: str, verdict: Verdict) -> Result:
        """After the gate's resume: the verdict's end, or exactly one execution."""
        if verdict.verdict == "closed":
            raise closed_quietly(verdict.status)
        if verdict.verdict == "expired":
            why = f"nobody decided on {call['name']} before the approval expired"
            raise Stop(RunStatus.FAILED, "approval_expired", why)
        if verdict.verdict == "mismatch":
            raise Stop(RunStatus.FAILED, "approval_mismatch", verdict.detail)
        if verdict.verdict == "denied":
            return self.conversation.denial(call, verdict.reason)
        step, seq = tool_step(call["name"]), self.next_seq()
        out = await self.rt.step(step, execute_irreversible, self.run_id, seq, call, approval_id)
        if out.closed:
            raise closed_quietly(out.status)
        if out.stop:
            raise Stop(RunStatus.FAILED, out.stop, out.detail)
        # Also when the ask's step ran again after a crash (its answer then comes from the
        # ledger: the question went out once) — the run still waits for the customer.
        if call["name"] == ASK_TOOL and out.ok:
            return await self._await_customer(call)
        return self.conversation.result(call, out.text, out.ok)

    async def _await_customer(self, call: Call) -> Result:
        """The question went out: park until the customer answers or the reply window ends.

        The approval gate's shape (agent.customer.wait): a message on the ticket's topic only
        wakes the run; what the customer wrote is read from the thread, in a step.
        """
        park = await self.rt.step(StepName.CUSTOMER_PARK, customer_park, self.run_id, call)
        if park.closed:
            raise closed_quietly(park.closed)
        remind_at = park.remind_at  # one reminder, when the merchant wants it
        while True:
            due = [remind_at] if remind_at is not None else []
            read = (self.run_id, park.after, park.until, *due)
            seen = await self.rt.step(StepName.CUSTOMER_READ, customer_read, *read)
            if seen.answered or seen.passed:
                break
            if seen.remind:
                # Once: a reply of the run's own, gated and claimed like any (its refusal,
                # at the daily cap say, is recorded and the wait goes on).
                remind_at = None
                await self._gated(reminder_call(call))
                again = await self.rt.step(
                    StepName.CUSTOMER_REPARK, customer_repark, self.run_id, park.until
                )
                if again.closed:
                    raise closed_quietly(again.closed)
                continue
            await self.rt.wait(park.topic, dt.datetime.fromisoformat(remind_at or park.until))
        resume = (self.run_id, self.next_seq(), call, park, seen.answered)
        answer = await self.rt.step(StepName.CUSTOMER_RESUME, customer_resume, *resume)
        if answer.verdict == "closed":
            raise closed_quietly(answer.status)
        if answer.verdict == "no_reply":
            raise Stop(RunStatus.EXHAUSTED, StopReason.CUSTOMER_NO_REPLY, answer.detail)
        return self.conversation.result(call, answer.text, True)


async def run_agent(rt: Runtime) -> Finished:
    return await Loop(rt).run()
