"""Finding a run or a ticket: the search page and the short run id as an address.

Thin views over ``deskhand.web.console.search`` (reads only, filtered by the merchant in SQL).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from deskhand.web.console import attention, forms, present
from deskhand.web.console import search as finding
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, refuse
from deskhand.web.console.views import NOT_FOUND


@require_safe
@login_required
@merchant_member
def run_short(request: ConsoleRequest, short: str) -> HttpResponse:
    """``/runs/0f3a9c12/``: the short id every table shows, on to the run it names."""
    found = finding.runs_by_prefix(merchant_id=request.membership.merchant_id, prefix=short)
    if len(found) == 1:
        return redirect("console:run", run_id=found[0].pk)
    if len(found) > 1:
        return refuse(
            request,
            404,
            f"More than one run starts with {short[:40]}: type more of its id, or search for it.",
        )
    return refuse(request, 404, f"No run of yours starts with {short[:40]}. {NOT_FOUND}")


@require_safe
@login_required
@merchant_member
def search(request: ConsoleRequest) -> HttpResponse:
    """Tickets and runs by customer name or email, order or ticket reference, or run id."""
    form = forms.SearchForm(request.GET)
    if not form.is_valid():
        return refuse(request, 400, forms.first_error(form))
    q = form.cleaned_data["q"]
    found = finding.search(merchant_id=request.membership.merchant_id, q=q)
    return render(
        request,
        "console/search.html",
        {
            "found": found,
            "search_q": q,
            "rows": present.run_rows(
                found.runs,
                attention.run_money(merchant_id=request.membership.merchant_id, runs=found.runs),
            ),
        },
    )
