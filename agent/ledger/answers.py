"""An irreversible call's answer, as its step row records it.

However the answer came about — performed now, found already made in the ledger, settled
later at the provider, refused before anyone was asked — the run's step log gets one
``tool`` row for it, written by this one function, so every such row reads the same way
(the console, replay and the auditor read them).
"""

from __future__ import annotations

from typing import Any

from agent.models.payloads import StepKind
from agent.record.steplog import log_step
from agent.steps import Done, ToolPayload
from agent.tools import Risk


def log_effect_answer(
    *,
    run_id: str,
    seq: int,
    tool: str,
    call_id: str,
    arguments: Any,
    result: ToolPayload,
    ok: bool,
    replayed: bool = False,
    latency_ms: int = 0,
) -> Done:
    """Write the row; return what the loop hands the model (``text``, ``ok``, ``replayed``).

    ``replayed``: nothing was performed by this step — the ledger already held the answer.
    """
    log_step(
        run_id=run_id,
        seq=seq,
        kind=StepKind.TOOL,
        tool=tool,
        tool_call_id=call_id,
        risk=Risk.IRREVERSIBLE.value,
        arguments=arguments,
        result=result,
        ok=ok,
        replayed=replayed,
        latency_ms=latency_ms,
    )
    return Done(text=result.text, ok=ok, replayed=replayed)
