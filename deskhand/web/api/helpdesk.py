"""``POST /api/v1/helpdesk/<merchant>/<source>``: a help desk's signed webhook (docs/api.md).

Signed, not keyed: the Standard Webhooks signature under the source's secret is the
credential, so this is a plain view outside the OpenAPI operations. Every refusal is a
problem, like the rest of the API.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from deskhand.domain.apikeys.helpdesk import HelpdeskRefused, deliver, verify
from deskhand.domain.apikeys.models import HelpdeskSource
from deskhand.web.api.problems import Problem, problem_response

NAMES = {400: "bad-json", 401: "bad-signature", 404: "not-found", 422: "invalid"}


@csrf_exempt
def helpdesk_webhook(request: HttpRequest, merchant: str, source: str) -> HttpResponse:
    if request.method != "POST":
        refused = problem_response(
            request,
            Problem(405, "method-not-allowed", f"{request.method} is not taken here; use POST."),
        )
        refused["Allow"] = "POST"
        return refused
    found = (
        HelpdeskSource.objects.filter(merchant__slug=merchant, slug=source, active=True)
        .select_related("merchant")
        .first()
    )
    if found is None:
        return problem_response(
            request, Problem(404, "not-found", "There is no such help-desk source here.")
        )
    headers = {k: v for k, v in request.headers.items()}
    try:
        data = verify(found, request.body, headers)
        done = deliver(source=found, webhook_id=headers.get("Webhook-Id", ""), data=data)
    except HelpdeskRefused as exc:
        problem = Problem(exc.status, NAMES.get(exc.status, "refused"), str(exc), field=exc.field)
        return problem_response(request, problem)
    return HttpResponse(
        json.dumps({**done.result, "duplicate": done.duplicate}),
        status=200 if done.duplicate else 201,
        content_type="application/json",
    )
