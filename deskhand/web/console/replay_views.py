"""Replay in the console, for merchant owners: what the model saw at any step, and forks.

The same two things ``replay RUN_ID --at N`` and ``replay RUN_ID --fork-from N`` do, behind
the owner role: a fork acts on the world again (its model may propose refunds and emails a
person then approves), and reading what the model saw lays out the whole conversation,
customer text included. Agents and viewers get a 403 naming the rule; another merchant's
run is a 404, as everywhere in the console.

Thin views: the rebuild is ``agent.conversation`` (through ``runpage.model_view``), the
fork is ``agent.replay.fork.fork_run`` with ``channel=web`` — the same function, checks and audit
event as the CLI — and what a fork would meet is read in ``deskhand.web.console.forks``.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from agent.models import Run
from agent.privacy.redaction import replay_refusal
from agent.replay.fork import fork_run, open_run_refusal
from agent.replay.knowledge import knowledge_read
from agent.replay.timeline import effective_steps
from agent.run.services import RunRefused
from approvals.models import Channel
from deskhand.domain.desk.permissions import require_owner
from deskhand.web.console import forks, runpage, selectors
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, refuse
from deskhand.web.console.views import MAX_SEQ, NOT_FOUND

REPLAY = "replay runs or fork them"


def _owned_run(request: ConsoleRequest, run_id: uuid.UUID, seq: int) -> Run | HttpResponse:
    """The run (of this merchant, for an owner) if step ``seq`` can be shown; else the refusal."""
    # Raises NotAllowed for an agent or a viewer: ``merchant_member`` answers 403 with it.
    require_owner(request.user, request.membership.merchant_id, REPLAY)
    found = selectors.run_get(merchant_id=request.membership.merchant_id, run_id=run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    gone = replay_refusal(found)
    if gone:
        return refuse(request, 410, gone, title="No longer kept")
    lines = forks.step_lines(found)
    last = lines[-1].seq if lines else 0
    # N = last + 1 is the conversation at the end, as ``replay --at`` has it.
    if not 1 <= seq <= min(last + 1, MAX_SEQ):
        where = f"its steps are 1 to {last}" if last else "it has no steps yet"
        return refuse(request, 404, f"Run {found.id} has no step {seq}; {where}.")
    return found


@require_safe
@login_required
@merchant_member
def replay_at(request: ConsoleRequest, run_id: uuid.UUID, seq: int) -> HttpResponse:
    """What the model saw before step ``seq``, read-only, with every step to move to."""
    found = _owned_run(request, run_id, seq)
    if isinstance(found, HttpResponse):
        return found
    view, turns = runpage.model_view(found, seq)
    steps = forks.step_lines(found)
    return render(
        request,
        "console/replay_at.html",
        {
            "run": found,
            "seq": seq,
            "view": view,
            "turns": turns,
            "steps": steps,
            "end_seq": steps[-1].seq + 1 if steps else None,
            "fork_refusal": forks.fork_refusal(found, seq),
            # As ``replay --at`` prints it: the versions read, as recorded, before this step.
            "knowledge_read": knowledge_read(effective_steps(found), before=seq),
        },
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def fork_from(request: ConsoleRequest, run_id: uuid.UUID, seq: int) -> HttpResponse:
    """GET: what a fork from step ``seq`` would meet, and a button. POST: create it, as the CLI does."""
    found = _owned_run(request, run_id, seq)
    if isinstance(found, HttpResponse):
        return found
    why = forks.fork_refusal(found, seq)
    if why is not None:
        return refuse(request, 400, why)
    busy = open_run_refusal(found)
    if busy:  # asked before the button is shown, and again (under the index) by fork_run
        return refuse(request, 409, busy)
    if request.method in ("GET", "HEAD"):
        return render(
            request,
            "console/fork_confirm.html",
            {"run": found, "seq": seq, "irreversible": forks.irreversible_from(found, seq)},
        )
    try:
        fork = fork_run(run=found, seq=seq, user=request.user, channel=Channel.WEB)
    except RunRefused as exc:  # e.g. the ticket has an open run: nothing was written
        return refuse(request, 409, str(exc))
    if fork.status == "failed":
        messages.error(request, f"The fork could not start: {fork.stop_detail}")
    else:
        messages.success(request, f"Forked from step {seq} of run {found.id}.")
    return redirect("console:run", run_id=fork.pk)
