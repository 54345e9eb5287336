"""``GET /healthz``: for a load balancer or a probe; no sign-in, no ids, no customer data."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from agent.ops.health import healthz as health_summary


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the database answers (``status`` says ``degraded`` when workers are missing,
    runs are stuck or wait on a version nobody serves); 503 when it does not."""
    status, body = health_summary()
    return JsonResponse(body, status=status)
