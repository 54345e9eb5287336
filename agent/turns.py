"""One model turn as one step: call the provider, then record what it cost.

The provider is called outside any database transaction; its reply is
written to the step log (tokens and cost added to the run) in one short
transaction afterwards. The reply is the step's checkpointed output, so a
resumed run never calls — or pays for — a completed turn again.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from agent import faults
from agent.models import Run, StepKind
from agent.prompts import system_prompt
from agent.providers import provider_for_run
from agent.steplog import log_step
from agent.tools import api_schemas
from agent.tools.registry import canonical_json


def model_turn(
    run_id: str, seq: int, messages: list[dict[str, Any]], fence_token: str
) -> dict[str, Any]:
    run = Run.objects.only("provider", "model").get(pk=run_id)
    provider = provider_for_run(run_id, run.provider, run.model)
    started = time.monotonic()
    faults.before_model(run_id)
    system, tools = system_prompt(fence_token), api_schemas()
    reply = provider.complete(system=system, messages=messages, tools=tools)
    reply = faults.after_model(run_id, reply)
    latency_ms = int((time.monotonic() - started) * 1000)
    log_step(
        run_id=run_id,
        seq=seq,
        kind=StepKind.MODEL,
        # Which prompt and tool set this call was sent, so a replay can tell if they changed.
        arguments={
            "message_count": len(messages),
            "prompt_sha256": hashlib.sha256(
                canonical_json({"system": system, "tools": tools}).encode()
            ).hexdigest(),
        },
        result={
            "content": reply.content,
            "stop_reason": reply.stop_reason,
            "provider": reply.provider,
            "model": reply.model,
        },
        input_tokens=reply.input_tokens,
        output_tokens=reply.output_tokens,
        cost_micros=reply.cost_micros,
        latency_ms=reply.latency_ms or latency_ms,
    )
    return reply.to_dict()
