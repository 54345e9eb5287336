"""Console pages for decisions: the approvals inbox (one, several, or with changes) and the
merchant's approval policy.

Thin typed views: the narrowing rule lives in ``agent.tools.narrowing`` and the registry, the
policy rules in ``agent.consent.policy``, decisions in ``approvals.services``. A POST that
asks for something no rule allows (a larger refund, another order, another tool) is a 400
with one sentence and changes nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agent.consent.policy import (
    PolicyRefused,
    Rule,
    policy_current,
    policy_preview,
    policy_rules,
    policy_save,
    policy_tools,
    rules_parse,
)
from agent.tools import REGISTRY, Risk
from agent.tools.narrowing import (
    NarrowingRefused,
    approval_approve_with_changes,
    changes_from_form,
)
from approvals.services import DecisionRefused, approval_decide, approvals_decide_many
from deskhand.domain.cli import sentence
from deskhand.domain.desk.money import AmountRefused, display_cents, format_cents, parse_amount
from deskhand.web.console import forms, present, runpage, selectors
from deskhand.web.console.decorators import ConsoleRequest, actor_required, merchant_member, refuse
from deskhand.web.console.views import NOT_FOUND, redirect_back


@dataclasses.dataclass(frozen=True)
class PolicyRow:
    tool: str
    on: bool
    money: bool
    max_amount_cents: int | None
    max_per_day: int | None
    text: str


def policy_rows(rules: list[Rule]) -> list[PolicyRow]:
    """Every tool a rule may cover, with the rule for it (if any), for the policy form."""
    by_tool = {r.tool: r for r in rules}
    rows = []
    for name in policy_tools():
        rule = by_tool.get(name)
        rows.append(
            PolicyRow(
                tool=name,
                on=rule is not None,
                money=bool(REGISTRY[name].money_field),
                max_amount_cents=rule.max_amount_cents if rule else None,
                max_per_day=rule.max_per_day if rule else None,
                text=rule.text() if rule else "",
            )
        )
    return rows


def person_only_tools() -> list[str]:
    return sorted(n for n, t in REGISTRY.items() if t.risk is Risk.IRREVERSIBLE and t.person_only)


# --- approvals ------------------------------------------------------------------


def _inbox(
    request: ConsoleRequest, extra: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    pending = selectors.pending_approvals(merchant_id=request.membership.merchant_id)
    items = present.approval_views([(i.approval, i.order) for i in pending], timezone.now())
    template = "console/approvals.html#inbox" if request.htmx else "console/approvals.html"
    return render(
        request,
        template,
        {
            "items": [(item, item.changeable) for item in items],
            "can_act": request.membership.can_act,
            **(extra or {}),
        },
        status=status,
    )


@require_safe
@login_required
@merchant_member
def approvals(request: ConsoleRequest) -> HttpResponse:
    return _inbox(request)


def decide_again(
    request: ConsoleRequest,
    message: str,
    approval: Any = None,
    field: str = "reason",
    picked: list[str] | None = None,
    status: int = 400,
    notice: str = "",
) -> HttpResponse:
    """The form a person just posted, again, with ``message`` beside the field it is about.

    A missing deny reason is a slip, not a refusal: the page it came from (the run page or
    the inbox) comes back, as a 400, with the sentence next to the reason box.
    """
    error = {
        "decide_error": message,
        "decide_error_for": str(approval.pk) if approval is not None else "bulk",
        "decide_error_field": field,
        "bulk_picked": picked or [],  # the cards ticked for a bulk decision stay ticked
        "page_error": notice,  # about the page as a whole (a card someone else decided first)
    }
    if approval is not None and request.POST.get("next") == reverse(
        "console:run", kwargs={"run_id": approval.run_id}
    ):
        found = selectors.run_get(
            merchant_id=request.membership.merchant_id, run_id=approval.run_id
        )
        if found is not None:
            context = {
                **runpage.panel_context(found, request.membership),
                **runpage.steps_context(found, can_act=request.membership.can_act),
                "live": "sse",
                **error,
            }
            return render(request, "console/run.html", context, status=status)
    return _inbox(request, error, status=status)


def _typed_amounts(request: ConsoleRequest, approval: Any) -> dict[str, str]:
    """``amount-<field>`` inputs (money typed in the order's currency) as cents, for narrowing.

    "150" and "150.00" are both 150 of the currency; more than the proposal, or nothing at
    all, is refused here in the person's units before the registry's rule sees it.
    """
    out: dict[str, str] = {}
    view = present.ApprovalView(approval, _order(approval), timezone.now())
    offered = {c.field: c for c in view.changeable}
    for key, text in request.POST.items():
        if not key.startswith(forms.AMOUNT_PREFIX):
            continue
        field = key[len(forms.AMOUNT_PREFIX) :]
        c = offered.get(field)
        if c is None or not c.is_money:
            raise AmountRefused(f"{field[:40]} is not an amount a person may change here.")
        amount = parse_amount(str(text), c.currency)
        if amount < 1:
            raise AmountRefused("The amount must be more than 0.")
        if amount > c.value:
            raise AmountRefused(
                f"{display_cents(amount, c.currency)} is more than the {c.shown} proposed: "
                "a person may only approve less (deny it with a reason to ask for more)."
            )
        out[field] = str(amount)
    return out


def _order(approval: Any) -> present.OrderFacts | None:
    found = selectors.order_facts(merchant_id=approval.merchant_id, arguments=approval.arguments)
    return present.OrderFacts(found) if found is not None else None


def already_decided(approval: Any) -> str:
    """ "Already approved by Sam at 12:41 (with changes)." for a card someone decided first."""
    approval.refresh_from_db()
    if approval.status not in ("approved", "denied") or approval.decided_at is None:
        return ""  # withdrawn or expired: the refusal's own sentence says why
    who = approval.decided_by_label
    at = timezone.localtime(approval.decided_at).strftime("%H:%M")
    changed = " with changes" if approval.changed else ""
    return (
        f"Already {approval.status}{changed} by {who} at {at}: a decision is made once, "
        "so yours was not recorded."
    )


def _form_message(form: Any) -> tuple[str, str]:
    """The field a failed decision form is about, and its sentence."""
    if "reason" in form.errors:
        return "reason", str(form.errors["reason"][0])
    return "", forms.first_error(form)


@require_POST
@login_required
@merchant_member
@actor_required("approve or deny irreversible actions")
def approval_decide_view(request: ConsoleRequest, approval_id: uuid.UUID) -> HttpResponse:
    approval = selectors.approval_get(
        merchant_id=request.membership.merchant_id, approval_id=approval_id
    )
    if approval is None:
        return refuse(request, 404, NOT_FOUND)
    form = forms.DecideForm(request.POST)
    if not form.is_valid():
        field, message = _form_message(form)
        if field:
            return decide_again(request, message, approval, field)
        return refuse(request, 400, message)
    approve = form.cleaned_data["decision"] == "approve"
    posted_tool = request.POST.get("tool")
    raw_changes = forms.posted_changes(request.POST)
    try:
        raw_changes.update(_typed_amounts(request, approval))
    except AmountRefused as exc:
        return decide_again(request, str(exc), approval, "change")
    try:
        if approve and (raw_changes or posted_tool is not None):
            if posted_tool is not None and posted_tool != approval.tool:
                raise NarrowingRefused(
                    f"this approval is for {approval.tool}; a decision cannot turn it into {posted_tool[:40]}."
                )
            decided = approval_approve_with_changes(
                approval=approval,
                user=request.user,
                changes=changes_from_form(approval.tool, raw_changes),
                reason=form.cleaned_data["reason"],
                channel="web",
            )
        elif raw_changes:
            return refuse(request, 400, "A denial approves nothing, so it cannot change the call.")
        else:
            decided = approval_decide(
                approval=approval,
                user=request.user,
                approve=approve,
                reason=form.cleaned_data["reason"],
                channel="web",
            )
    except NarrowingRefused as exc:
        return decide_again(request, sentence(str(exc)), approval, "change")
    except DecisionRefused as exc:
        notice = already_decided(approval) or sentence(str(exc))
        return decide_again(request, "", approval, "none", status=409, notice=notice)
    verb = "Approved" if approve else "Denied"
    if decided.changed:
        proposed = approval.arguments if isinstance(approval.arguments, dict) else {}
        facts = _order(approval)
        currency = facts.order.currency if facts is not None else "USD"
        verb = (
            f"Approved with changes ({present.changes_words(proposed, decided.executes, currency)})"
        )
    messages.success(request, f"{verb}: {approval.preview.splitlines()[0]}")
    return redirect_back(request, reverse("console:approvals"))


@require_POST
@login_required
@merchant_member
@actor_required("approve or deny irreversible actions")
def approvals_bulk_view(request: ConsoleRequest) -> HttpResponse:
    """Approve or deny several approvals at once: each bound to its own hash, decided and
    audited on its own. A selection that names anything not pending here is refused whole."""
    form = forms.BulkDecideForm(request.POST)
    if not form.is_valid():
        field, message = _form_message(form)
        if form.nothing_picked:
            message = str(form.non_field_errors()[0])
        if field or form.nothing_picked:
            return decide_again(
                request, message, None, field or "reason", [str(pk) for pk, _ in form.picked]
            )
        return refuse(request, 400, message)
    merchant_id = request.membership.merchant_id
    picked = []
    for pk, digest in form.picked:
        approval = selectors.approval_get(merchant_id=merchant_id, approval_id=pk)
        if approval is None:
            return refuse(request, 404, NOT_FOUND)
        if approval.args_hash != digest:
            return refuse(
                request,
                400,
                f"Approval {pk} is for a call with hash {approval.args_hash[:12]}…, not "
                f"{digest[:12]}…; nothing was decided. Reload the inbox.",
            )
        picked.append(approval)
    approve = form.cleaned_data["decision"] == "approve"
    outcome = approvals_decide_many(
        approvals=picked,
        user=request.user,
        approve=approve,
        reason=form.cleaned_data["reason"],
        channel="web",
    )
    done = [a for a, why in outcome if not why]
    if done:
        messages.success(request, f"{'Approved' if approve else 'Denied'} {len(done)}.")
    for a, why in outcome:
        if why:
            messages.error(request, f"Not decided: {a.preview.splitlines()[0]} — {why}")
    return redirect_back(request, reverse("console:approvals"))


# --- approval policy ------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def policy(request: ConsoleRequest) -> HttpResponse:
    """The merchant's approval rules: read by every member, previewed and saved by an owner."""
    merchant = request.membership.merchant
    current = policy_current(merchant.pk)
    context: dict[str, Any] = {
        "merchant": merchant,
        "current": current,
        "rows": policy_rows(policy_rules(current)),
        "is_owner": request.membership.is_owner,
        "history": selectors.policy_history(merchant_id=merchant.pk),
        "preview": None,
        "person_only": person_only_tools(),
    }
    if request.method in ("GET", "HEAD"):
        return render(request, "console/policy.html", context)
    if not request.membership.is_owner:
        return refuse(request, 403, "Only an owner may change the approval policy.")
    outside = forms.policy_rule_refused(request.POST, policy_tools(), person_only_tools())
    if outside is not None:
        return refuse(request, 400, outside)
    try:
        rules = rules_parse(forms.policy_rules_posted(request.POST, policy_tools()))
    except (PolicyRefused, ValueError) as exc:
        return refuse(request, 400, sentence(str(exc)))
    if request.POST.get("action") == "preview":
        context["rows"] = policy_rows(rules)
        preview = policy_preview(merchant=merchant, rules=rules)
        preview["amount"] = format_cents(preview["amount_cents"])
        for per in preview["tools"].values():
            per["amount"] = format_cents(per["amount_cents"])
        context["preview"] = preview
        return render(request, "console/policy.html", context)
    try:
        saved = policy_save(
            merchant=merchant, user=request.user, rules=[r.as_json() for r in rules], channel="web"
        )
    except PolicyRefused as exc:
        return refuse(request, 409, sentence(str(exc)))
    messages.success(request, f"Saved the approval policy as version {saved.version}.")
    return redirect("console:policy")
