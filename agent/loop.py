"""The agent loop. It knows the runtime protocol, the registry and the steps — not DBOS.

The conversation is a local variable rebuilt, on replay, from checkpointed
step outputs; the loop body itself reads nothing else (no clock, no database,
no randomness), so a resumed run walks the same path up to the step that was
in flight and continues from there.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent import fence
from agent.bounds import bounds_check
from agent.gate import DENIAL_TEXT, gate_read, gate_request, gate_resume
from agent.models import RunStatus
from agent.runs import run_begin, run_finish
from agent.runtime import Runtime
from agent.steering import notes_record
from agent.tools import REGISTRY, Risk
from agent.tools.execute import execute_irreversible, execute_tool, ledger_lookup, validate_call
from agent.turns import model_turn
from approvals.models import STEER_TOPIC


class Stop(Exception):
    """End the run now with this status and reason."""

    def __init__(self, status: str, reason: str, detail: str = "") -> None:
        super().__init__(f"{status}: {reason} {detail}")
        self.status, self.reason, self.detail = status, reason, detail


class Loop:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.run_id = rt.run_id
        self.seq = 1
        self.token = ""
        self.last_text = ""

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq

    async def run(self) -> dict[str, Any]:
        begin = await self.rt.step("run.begin", run_begin, self.run_id)
        if begin["status"] not in (RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL):
            return {"status": begin["status"]}
        self.token = begin["fence_token"]
        self.seq = begin["next_seq"]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": begin["prompt"]}]}
        ]
        try:
            while True:
                guidance = await self._staff_guidance()
                if guidance:
                    # The last turn is always the user's here (the prompt or tool results), and
                    # two user turns in a row are not allowed: the guidance joins that turn.
                    messages[-1]["content"] = [*messages[-1]["content"], *guidance]
                hit = await self.rt.step("bounds.check", bounds_check, self.run_id)
                if hit:
                    raise Stop(RunStatus.EXHAUSTED, hit["reason"], hit["detail"])
                reply = await self.rt.step(
                    "model", model_turn, self.run_id, self._next_seq(), messages, self.token
                )
                if reply["stop_reason"] == "refusal":
                    raise Stop(RunStatus.FAILED, "model_refusal", "the model refused to continue")
                content = reply["content"]
                self.last_text = "\n".join(
                    b.get("text", "") for b in content if b.get("type") == "text"
                ).strip()
                calls = [b for b in content if b.get("type") == "tool_use"]
                messages.append({"role": "assistant", "content": content})
                if not calls:
                    return await self._finish(RunStatus.SUCCEEDED, "end_turn", "")
                results = [await self._settle(call) for call in calls]
                messages.append({"role": "user", "content": results})
        except Stop as stop:
            return await self._finish(stop.status, stop.reason, stop.detail)

    async def _finish(self, status: str, reason: str, detail: str) -> dict[str, Any]:
        return await self.rt.step(
            "run.finish",
            run_finish,
            self.run_id,
            self._next_seq(),
            status,
            reason,
            detail,
            self.last_text,
        )

    async def _staff_guidance(self) -> list[dict[str, Any]]:
        notes = await self.rt.drain(STEER_TOPIC)
        if not notes:
            return []
        recorded = await self.rt.step(
            "notes.record", notes_record, self.run_id, self._next_seq(), notes
        )
        return [
            {
                "type": "text",
                "text": f"Staff guidance from {n['author']} (merchant staff, via the console):\n{fence.wrap(n['body'], self.token)}",
            }
            for n in recorded
        ]

    def _result(self, call: dict[str, Any], text: str, ok: bool) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": fence.wrap(text, self.token),
            "is_error": not ok,
        }

    async def _settle(self, call: dict[str, Any]) -> dict[str, Any]:
        tool = REGISTRY.get(call.get("name", ""))
        error, _ = validate_call(call.get("name", ""), call.get("input"))
        if tool is None or error is not None or tool.risk is not Risk.IRREVERSIBLE:
            out = await self.rt.step(
                f"tool.{call.get('name', '?')}", execute_tool, self.run_id, self._next_seq(), call
            )
            return self._result(call, out["text"], out["ok"])
        return await self._gated(call)

    async def _gated(self, call: dict[str, Any]) -> dict[str, Any]:
        """An irreversible call: ledger first, then a person, then exactly one execution."""
        done = await self.rt.step("ledger.lookup", ledger_lookup, self.run_id, call)
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
            "gate.request", gate_request, self.run_id, self._next_seq(), call
        )
        if request.get("mismatch"):
            # A re-derived call under an existing approval: refuse now rather than ask a
            # person to decide something that could only fail at resume.
            raise Stop(RunStatus.FAILED, "approval_mismatch", request["mismatch"])
        approval_id = request["approval_id"]
        expires_at = dt.datetime.fromisoformat(request["expires_at"])
        waited_from = await self.rt.now()
        while True:
            decision = await self.rt.step("gate.read", gate_read, approval_id)
            if decision["status"] != "pending":
                break
            now = await self.rt.now()
            remaining = (expires_at - now).total_seconds()
            if remaining <= 0:
                break
            # The timeout comes from the stored expires_at, so a restart never extends it.
            await self.rt.wait(request["topic"], remaining)
        waited = (await self.rt.now() - waited_from).total_seconds()
        verdict = await self.rt.step(
            "gate.resume", gate_resume, self.run_id, self._next_seq(), call, approval_id, waited
        )
        if verdict["verdict"] == "expired":
            raise Stop(
                RunStatus.FAILED,
                "approval_expired",
                f"nobody decided on {call['name']} before the approval expired",
            )
        if verdict["verdict"] == "mismatch":
            raise Stop(RunStatus.FAILED, "approval_mismatch", verdict["detail"])
        if verdict["verdict"] == "denied":
            return self._result(
                call, DENIAL_TEXT.format(reason=verdict.get("reason") or "(no reason given)"), False
            )
        out = await self.rt.step(
            f"tool.{call['name']}",
            execute_irreversible,
            self.run_id,
            self._next_seq(),
            call,
            approval_id,
        )
        if "stop" in out:
            raise Stop(RunStatus.FAILED, out["stop"], out["detail"])
        return self._result(call, out["text"], out["ok"])


async def run_agent(rt: Runtime) -> dict[str, Any]:
    return await Loop(rt).run()
