"""One model turn as one step: call the provider, then record what it cost.

The provider is called outside any database transaction; its reply is
written to the step log (tokens and cost added to the run) in one short
transaction afterwards. The reply is the step's checkpointed output, so a
resumed run never calls — or pays for — a completed turn again.

A call that produced no reply (``ProviderError``: a permanent API error, or the
provider's own retries spent) is not raised out of the step: it is returned as
a ``Reply`` with ``provider_error`` so its cause survives the checkpoint (a replayed
exception would come back as a generic portable error) and the loop ends the run
``failed`` / ``provider_error`` with it. The workflow never retries this step;
the provider is the one retry layer.

The reply is untrusted input: ``agent.conversation.untrusted.reply_content`` makes it safe (NUL
replaced, blank or broken blocks dropped, tool-call ids the API would refuse replaced)
before the step log, the loop or any later table sees it.

**Waits are the workflow's.** The loop passes ``spent`` and the provider hands back a wait
the API names (``retry-after`` on a 429/529) instead of sleeping it: the step returns a
``Reply`` holding a ``Wait`` (``agent.steps``), having written ``Run.waiting_until`` / ``wait_reason``
for the run page; the loop sleeps durably and calls again. The call that goes ahead clears
them. Attempts and waiting add up across those calls, against the provider's one
``RetryPolicy`` (docs/rate-limits.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agent.conversation import prompt_versions
from agent.conversation.live import messages_sha256, prompt_sha256, with_guidance
from agent.conversation.prompts import system_prompt
from agent.conversation.untrusted import ids_used, reply_content, storable
from agent.models import Run
from agent.models.payloads import StepKind
from agent.providers import provider_for_run
from agent.providers.base import ProviderError, return_waits
from agent.record import faults
from agent.record.steplog import log_step
from agent.run import bounds, steering
from agent.run.bounds import bounds_step
from agent.run.steering import notes_take
from agent.steps import ModelPayload, Reply, Turn, Wait
from agent.tools import api_schemas
from deskhand.domain.desk.rows import row_by_pk


def model_turn(
    run_id: str,
    seq: int,
    messages: list[dict[str, Any]],
    fence_token: str,
    spent: dict[str, Any] | None = None,
    run: Run | None = None,
) -> Reply:
    """One call. ``spent`` (``{"attempts": n, "waited": s}``, the calls and durable sleeps
    this turn already used) says the workflow sleeps the API's waits itself: a wait it asks
    for is returned as the reply's ``wait`` while the retry policy allows it (module docstring).
    ``run``: the run as the turn just read it (not read again)."""
    if run is None:
        run = Run.objects.only("provider", "model", "waiting_until").get(pk=run_id)
    if run.waiting_until is not None:  # the wait is over: the call proceeds
        Run.objects.filter(pk=run_id).update(waiting_until=None, wait_reason="")
    provider = provider_for_run(run_id, run.provider, run.model)
    started = time.monotonic()
    faults.before_model(run_id)
    # An empty token: the run's fence token is in its opening turn, not the system prompt.
    system, tools = system_prompt(fence_token or None), api_schemas()
    token = return_waits.set(spent is not None)
    try:
        reply = provider.complete(system=system, messages=messages, tools=tools)
    except ProviderError as exc:
        wait = _durable_wait(run_id, run.provider, provider, exc, spent)
        if wait is not None:
            return Reply(wait=wait)
        return Reply(
            provider_error=storable(str(exc))[:2000],
            kind=exc.kind,
            transient=exc.transient,
            attempts=exc.attempts + (spent or {}).get("attempts", 0),
        )
    finally:
        return_waits.reset(token)
    reply = faults.after_model(run_id, reply)
    # Untrusted input (agent.conversation.untrusted): made safe before the row, the checkpoint or the loop.
    content, replaced = reply_content(reply.content, used=ids_used(messages), seq=seq)
    stop = reply.stop_reason if isinstance(reply.stop_reason, str) else ""
    reply = dataclasses.replace(reply, content=content, stop_reason=storable(stop)[:64])
    latency_ms = int((time.monotonic() - started) * 1000)
    # Which prompt and tool set this call was sent, so a replay can tell if they changed.
    prompt_digest = prompt_sha256(system, tools)
    sent = {
        "message_count": len(messages),
        "prompt_sha256": prompt_digest,
        # And which conversation: a re-execution of this step must be sent the same one.
        "messages_sha256": messages_sha256(messages),
    }
    with transaction.atomic():  # the version (if new) and the step row: one commit
        # And which prompt version (taken without the fence token), stored once per version.
        version = prompt_versions.record(system, tools, fence_token)
        log_step(
            run_id=run_id,
            seq=seq,
            kind=StepKind.MODEL,
            arguments=sent,
            result=ModelPayload(
                content=reply.content,
                stop_reason=reply.stop_reason,
                provider=reply.provider,
                model=reply.model,
                message_count=len(messages),
                prompt_sha256=prompt_digest,
                prompt_version=version,
                replaced_ids=replaced,
            ),
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cache_read_tokens=reply.cache_read_tokens,
            cache_write_tokens=reply.cache_write_tokens,
            cost_micros=reply.cost_micros,
            latency_ms=reply.latency_ms or latency_ms,
            prompt_version=version,
        )
    return Reply(content=reply.content, stop_reason=reply.stop_reason)


def _durable_wait(
    run_id: str, name: str, provider: Any, exc: ProviderError, spent: dict[str, Any] | None
) -> Wait | None:
    """The wait the workflow should sleep before calling again, recorded on the run; or None
    when the call is to fail now (no wait named, or the retry policy is spent)."""
    policy = getattr(provider, "retry", None)
    if spent is None or policy is None or not exc.transient or exc.retry_after is None:
        return None
    attempts = spent.get("attempts", 0) + exc.attempts
    waited = float(spent.get("waited", 0.0))
    seconds = round(exc.retry_after, 3)
    if attempts >= policy.max_attempts or waited + seconds > policy.budget_seconds:
        return None
    why = "rate limited" if exc.status == 429 else exc.kind.replace("_", " ")
    reason = f"{why} by {name}: retry after {seconds:g} s"
    until = timezone.now() + dt.timedelta(seconds=seconds)
    Run.objects.filter(pk=run_id).update(waiting_until=until, wait_reason=reason[:200])
    return Wait(seconds, reason, until.isoformat(), attempts, waited + seconds)


def turn(
    run_id: str,
    seq: int,
    messages: list[dict[str, Any]],
    system_token: str,
    fence_token: str,
    spent: dict[str, Any] | None = None,
) -> Turn:
    """A whole model turn as one durable step: staff notes, the bounds check, the call.

    One DBOS operation per turn. Each part is safe to run again: notes are taken once and a
    re-execution gets the recorded ones back (``agent.run.steering.notes_take``), the bounds
    check only reads, and the call is the model step as before. Notes join the messages
    here exactly as the loop then joins them to its own conversation (``with_guidance``).

    Output (``Turn``): the notes taken, where the loop's next row goes, the bounds (a hit
    ends the run before any call) and, unless a bound was hit, the call's ``Reply``.
    """
    with transaction.atomic():
        # One read of the run for the notes, the bounds and the call's provider: one
        # transaction before the call, not six, and it writes nothing unless a note waits.
        run = row_by_pk(Run, run_id, related=("merchant",))
        now = timezone.now()
        _read_ahead(run, seq, now)
        notes, next_seq = notes_take(run_id, seq, run=run)
        if next_seq != seq:  # a NOTE row: the run's totals moved
            run = row_by_pk(Run, run_id, related=("merchant",))  # and nothing read ahead
        seq = next_seq
        hit = bounds_step(run_id, run=run, now=now)
    if hit.reason:
        return Turn(notes, seq, hit)
    sent = with_guidance(messages, notes, fence_token)
    reply = model_turn(run_id, seq, sent, system_token, spent, run=run)
    return Turn(notes, seq + (1 if reply.wrote_row else 0), hit, reply)


# A turn's three questions before the call — is a staff note waiting (``steering``), what
# have the merchant and the platform spent today, is a call repeating (``bounds``) — as one
# statement: three round trips a turn were a fifth of its statements.
_READ_AHEAD = f"""
SELECT ({steering.NOTHING_TO_TAKE}), spent.*, repeated.*
FROM ({bounds.SPEND_TODAY}) spent LEFT JOIN LATERAL ({bounds.REPEATED}) repeated ON TRUE
"""


def _read_ahead(run: Run, seq: int, now: dt.datetime) -> None:
    if run.forked_from_id is not None and run.fork_step and seq < run.fork_step:
        return  # a fork replaying a turn reads its parent's notes: the usual way
    params = [
        *steering.nothing_to_take_params(run, seq),
        *bounds.spend_params(run, now),
        *bounds.repeated_params(run),
    ]
    with connection.cursor() as cur:
        cur.execute(_READ_AHEAD, params)
        row = cur.fetchone()
    steering.remember_nothing_to_take(run, seq, bool(row[0]))
    bounds.remember(run, now, (int(row[1]), int(row[2])), row[3:6])
