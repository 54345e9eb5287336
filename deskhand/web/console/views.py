"""Console pages and actions: thin typed views over selectors and services.

Each view says its rules in its decorators. Reads render a whole page, or one
partial of it (``page.html#name``) for htmx; writes are POST-only forms that
redirect back (so every action works without JavaScript) and answer bad
input with a clear 4xx that writes nothing.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST, require_safe
from django_htmx.http import HttpResponseStopPolling

from agent.effects.selectors import findings_summary, merchant_adapters, open_findings
from agent.models import TERMINAL_STATUSES, Run, payloads
from agent.privacy.redaction import replay_refusal
from agent.run import selectors as agent_selectors
from agent.run.services import RunRefused, run_cancel, run_start
from agent.run.steering import SteerRefused, run_steer
from deskhand.domain.desk.models import Ticket
from deskhand.domain.desk.orders import SourceUnavailable
from deskhand.web.console import attention, forms, present, runpage, selectors
from deskhand.web.console.decorators import ConsoleRequest, actor_required, merchant_member, refuse
from deskhand.web.console.services import UndoRefused, step_undo
from deskhand.web.console.thread import thread_lines
from deskhand.web.console.usage import usage_days

MAX_SEQ = 2_147_483_647  # Step.seq is a Postgres integer; a larger number names no step
HOME_QUEUE = 10  # the home page shows the oldest few; /attention/ shows them all
NOT_FOUND = "There is nothing here, or it belongs to another merchant."


def redirect_back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    """Redirect to the form's ``next`` if it is one of our own paths, else to ``default``."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(default)


# --- overview -------------------------------------------------------------------


@require_safe
@login_required
@merchant_member
def home(request: ConsoleRequest) -> HttpResponse:
    merchant_id = request.membership.merchant_id
    recent = selectors.runs_page(merchant_id=merchant_id, limit=10).rows
    return render(
        request,
        "console/home.html",
        {
            "pending_count": selectors.pending_count(merchant_id=merchant_id),
            "open_counts": selectors.open_run_counts(merchant_id=merchant_id),
            "queue": attention.attention_items(merchant_id=merchant_id, now=timezone.now())[
                :HOME_QUEUE
            ],
            "recent": present.run_rows(
                recent, attention.run_money(merchant_id=merchant_id, runs=recent)
            ),
            "findings_open": findings_summary(merchant_id)["open"],
        },
    )


@require_safe
@login_required
@merchant_member
def attention_list(request: ConsoleRequest) -> HttpResponse:
    """Everything waiting for a person, oldest first; every member may look."""
    items = attention.attention_items(
        merchant_id=request.membership.merchant_id, now=timezone.now()
    )
    return render(request, "console/attention.html", {"queue": items})


# --- tickets --------------------------------------------------------------------


@require_safe
@login_required
@merchant_member
def tickets(request: ConsoleRequest) -> HttpResponse:
    filters = forms.TicketFilters(request.GET)
    if not filters.is_valid():
        return refuse(request, 400, forms.first_error(filters))
    f = filters.cleaned_data
    page = selectors.tickets_page(
        merchant_id=request.membership.merchant_id,
        status=f["status"],
        priority=f["priority"],
        before_id=f["before"],
    )
    stakes = attention.ticket_stakes(merchant_id=request.membership.merchant_id, tickets=page.rows)
    rows = [(t, stakes.get(t.pk)) for t in page.rows]
    template = "console/tickets.html#rows" if request.htmx else "console/tickets.html"
    return render(request, template, {"page": page, "rows": rows, "filters": filters, "f": f})


@require_safe
@login_required
@merchant_member
def ticket(request: ConsoleRequest, reference: str) -> HttpResponse:
    found = selectors.ticket_get(merchant_id=request.membership.merchant_id, reference=reference)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    return render(
        request,
        "console/ticket.html",
        {
            "ticket": found,
            **_orders(found),
            "runs": present.run_rows(selectors.ticket_runs(ticket=found)),
            "thread": thread_lines(found),
            "can_act": request.membership.can_act,
            **_already_done(found),
        },
    )


def _orders(ticket: Ticket) -> dict[str, object]:
    """The customer's orders from the merchant's order source, or why they cannot be read."""
    try:
        found = selectors.ticket_orders(merchant_id=ticket.merchant_id, email=ticket.customer.email)
    except SourceUnavailable as exc:
        return {"orders": [], "orders_unavailable": f"{str(exc)[:1].upper()}{str(exc)[1:]}."}
    return {"orders": [present.SourcedOrder(o) for o in found]}


def _already_done(ticket: Ticket) -> dict[str, object]:
    done = agent_selectors.ticket_done(ticket=ticket)
    return {
        "done": [(d, present.cents(d.amount_cents, d.currency)) for d in done],
        "confirm_rerun": agent_selectors.rerun_needs_confirming(ticket=ticket, done=done),
    }


@require_POST
@login_required
@merchant_member
@actor_required("start runs")
def ticket_run(request: ConsoleRequest, reference: str) -> HttpResponse:
    found = selectors.ticket_get(merchant_id=request.membership.merchant_id, reference=reference)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    context = _already_done(found)
    if context["confirm_rerun"] and request.POST.get("confirm") != "rerun":
        # A resolved ticket, or one already acted on: say what was done, and ask once more.
        return render(request, "console/ticket_rerun.html", {"ticket": found, **context})
    try:
        run = run_start(ticket=found, user=request.user, channel="web")
    except RunRefused as exc:
        return refuse(request, 409, str(exc))
    return redirect("console:run", run_id=run.pk)


# --- runs -----------------------------------------------------------------------


@require_safe
@login_required
@merchant_member
def runs(request: ConsoleRequest) -> HttpResponse:
    filters = forms.RunFilters(request.GET)
    if not filters.is_valid():
        return refuse(request, 400, forms.first_error(filters))
    f = filters.cleaned_data
    try:
        page = selectors.runs_page(
            merchant_id=request.membership.merchant_id,
            status=f["status"],
            stop_reason=f["stop_reason"],
            q=f["q"],
            cursor=f["cursor"],
        )
    except selectors.BadCursor:
        return refuse(request, 400, "That page link is not valid; start again from the first page.")
    template = "console/runs.html#rows" if request.htmx else "console/runs.html"
    return render(
        request,
        template,
        {
            "page": page,
            "rows": present.run_rows(
                page.rows,
                attention.run_money(merchant_id=request.membership.merchant_id, runs=page.rows),
            ),
            "filters": filters,
            "f": f,
        },
    )


def _run_or_none(request: ConsoleRequest, run_id: uuid.UUID) -> Run | None:
    return selectors.run_get(merchant_id=request.membership.merchant_id, run_id=run_id)


@require_safe
@login_required
@merchant_member
def run(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    found = _run_or_none(request, run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    context = {
        **runpage.panel_context(found, request.membership),
        **runpage.steps_context(found, can_act=request.membership.can_act),
        "live": "poll" if request.GET.get("live") == "poll" else "sse",
    }
    return render(request, "console/run.html", context)


@require_safe
@login_required
@merchant_member
def run_steps(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    """The polling fallback: what the stream would have sent since step ``after``.

    For htmx, a fresh poller plus out-of-band swaps (new steps, the panel, and
    the actions only if they changed, so a half-typed note survives); 286 once
    the run is terminal stops the polling. A plain GET gets the whole page.
    """
    found = _run_or_none(request, run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    after_raw = request.GET.get("after", "0")
    if not (after_raw.isascii() and after_raw.isdigit()) or len(after_raw) > 9:  # not "²" or "٣"
        return refuse(request, 400, "after must be a step number.")
    can_act = request.membership.can_act
    if not request.htmx:  # a plain fetch gets a whole page: readable with no JavaScript at all
        context = {
            **runpage.panel_context(found, request.membership),
            **runpage.steps_context(found, can_act=can_act),
            "live": "poll",
        }
        return render(request, "console/run.html", context)
    context = {
        **runpage.panel_context(found, request.membership),
        **runpage.steps_context(found, after=int(after_raw), can_act=can_act),
    }
    context["actions_changed"] = request.GET.get("actions") != context["actions_sig"]
    context["reissued"] = runpage.undoable_items(found, up_to=int(after_raw), can_act=can_act)
    response = render(request, "console/run.html#poll", context)
    if found.status in TERMINAL_STATUSES:
        stop = HttpResponseStopPolling()  # 286: htmx stops polling; the final state is in the body
        stop.content = response.content
        return stop
    return response


@require_safe
@login_required
@merchant_member
def step_sent(request: ConsoleRequest, run_id: uuid.UUID, seq: int) -> HttpResponse:
    """What the model was sent at model step ``seq`` (any other step: the conversation so far)."""
    found = _run_or_none(request, run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    if seq > MAX_SEQ or not found.step_log.filter(seq=seq).exists():
        return refuse(request, 404, f"Run {found.id} has no step {seq}.")
    gone = replay_refusal(found)
    if gone:
        return refuse(request, 410, gone, title="No longer kept")
    view, turns = runpage.model_view(found, seq)
    return render(
        request, "console/sent.html", {"run": found, "seq": seq, "view": view, "turns": turns}
    )


@require_POST
@login_required
@merchant_member
@actor_required("cancel runs")
def run_cancel_view(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    found = _run_or_none(request, run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    try:
        cancelled = run_cancel(run=found, user=request.user, channel="web")
    except RunRefused as exc:
        return refuse(request, 409, str(exc))
    if cancelled.status == "cancelling":
        messages.success(
            request,
            "Cancel recorded: nothing more will happen for this run. It shows cancelled once "
            "its workflow is confirmed stopped.",
        )
    else:
        messages.success(request, "Run cancelled.")
    return redirect("console:run", run_id=found.pk)


@require_POST
@login_required
@merchant_member
@actor_required("steer runs")
def run_steer_view(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    found = _run_or_none(request, run_id)
    if found is None:
        return refuse(request, 404, NOT_FOUND)
    form = forms.SteerForm(request.POST)
    if not form.is_valid():
        # Answered on the run page, the note kept in its box: never cut, never lost.
        context = {
            **runpage.panel_context(found, request.membership),
            **runpage.steps_context(found, can_act=request.membership.can_act),
            "live": "sse",
            "steer_error": forms.steer_refusal(form),
            "steer_body": str(request.POST.get("body", "")),
        }
        return render(request, "console/run.html", context, status=400)
    try:
        run_steer(run=found, user=request.user, body=form.cleaned_data["body"], channel="web")
    except SteerRefused as exc:
        return refuse(request, 409, str(exc))
    messages.success(request, "Note sent; the agent reads it before its next turn.")
    return redirect("console:run", run_id=found.pk)


@require_POST
@login_required
@merchant_member
@actor_required("undo the agent's actions")
def step_undo_view(request: ConsoleRequest, run_id: uuid.UUID, seq: int) -> HttpResponse:
    found = _run_or_none(request, run_id)
    if found is None or seq > MAX_SEQ:
        return refuse(request, 404, NOT_FOUND)
    try:
        undo = step_undo(run=found, seq=seq, user=request.user, channel="web")
    except UndoRefused as exc:
        return refuse(request, 409, str(exc))
    messages.success(request, payloads.read_as(undo, payloads.UndoPayload).text or "Undone.")
    return redirect(reverse("console:run", kwargs={"run_id": found.pk}) + f"#step-{undo.seq}")


# --- usage ----------------------------------------------------------------------


@require_safe
@login_required
@merchant_member
def usage(request: ConsoleRequest) -> HttpResponse:
    merchant = request.membership.merchant
    return render(
        request,
        "console/usage.html",
        {
            "merchant": merchant,
            "days": usage_days(merchant=merchant),
            "spend_cap": present.dollars(merchant.daily_spend_cap_micros),
            "refund_cap": present.cents(merchant.daily_refund_ceiling_cents),
        },
    )


# --- merchant -------------------------------------------------------------------


@require_safe
@login_required
@merchant_member
def merchant(request: ConsoleRequest) -> HttpResponse:
    """The merchant's settings: its policy, where its effects happen, reconciliation's findings."""
    m = request.membership.merchant
    return render(
        request,
        "console/merchant.html",
        {
            "merchant": m,
            "adapters": merchant_adapters(m),
            "findings": open_findings(m.pk),
            "refund_cap": present.cents(m.daily_refund_ceiling_cents),
            "run_refund_cap": present.cents(m.run_refund_ceiling_cents),
            "spend_cap": present.dollars(m.daily_spend_cap_micros),
        },
    )
