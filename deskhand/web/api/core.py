"""The API object: key authentication, scopes, the rate limit, problems, idempotency, audit.

Rules at a glance: every operation needs ``Authorization: Bearer <key>`` (401 without);
a key's scope is checked first thing in the operation (403 naming the scope); each key
may make ``DESKHAND_API_KEY_LIMIT`` requests per window (429 with ``Retry-After``);
everything is looked up through the key's merchant, so another merchant's ids are 404.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from agent.run.services import RunRefused
from agent.run.steering import SteerRefused
from agent.tools.narrowing import NarrowingRefused
from approvals.audit import audit_record
from approvals.models import Channel
from approvals.services import DecisionRefused, ReasonRequired
from deskhand.domain.apikeys import store
from deskhand.domain.apikeys.models import ApiKey
from deskhand.domain.apikeys.services import key_authenticate, key_count_request
from deskhand.domain.desk.models import Membership
from deskhand.domain.desk.permissions import NotAllowed, NotVisible, require_actor
from deskhand.web.api import document
from deskhand.web.api.problems import CONTENT_TYPE, Problem, problem_response


class KeyBearer(HttpBearer):
    """``Authorization: Bearer dh_…``: the key's merchant is everything the request sees.

    Also the first thing every operation checks once its method is known (ninja answers a
    method it does not take before this), so it refuses, 415, a body that is not JSON:
    ninja would parse a ``text/plain`` one as JSON all the same, and the document promises
    ``application/json`` only."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = key_authenticate(token)
        if key is None:
            return None
        window = key_count_request(key)
        if window.exceeded:
            raise Problem(
                429,
                "rate-limited",
                f"This key may make {window.limit} requests per window; "
                f"try again in {window.reset_seconds} s.",
                headers={"Retry-After": str(window.reset_seconds)},
            )
        if request.body and not _is_json(request.content_type or ""):
            sent = request.content_type or "no Content-Type"
            raise Problem(
                415,
                "unsupported-media-type",
                f"The body must be JSON, sent as 'Content-Type: application/json' (not {sent}).",
                field="Content-Type",
            )
        return key


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


class Api(NinjaAPI):
    def get_openapi_schema(self, **kwargs: Any) -> Any:
        """Ninja's document, completed with what it cannot know (``deskhand.web.api.document``)."""
        return document.complete(super().get_openapi_schema(**kwargs))


api = Api(
    title="Deskhand",
    version="1",
    description="Tickets in, runs and decisions out. See docs/api.md.",
    urls_namespace="api-v1",
    auth=KeyBearer(),
)


# --- refusals as problems --------------------------------------------------------


def as_problem(exc: Exception) -> Problem | None:
    """The problem a service's refusal is, or None for an error of ours."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, NotVisible):
        return Problem(
            404, "not-found", "There is nothing here, or it belongs to another merchant."
        )
    if isinstance(exc, NotAllowed):
        return Problem(403, "not-allowed", _sentence(str(exc)), field=getattr(exc, "field", ""))
    if isinstance(exc, ReasonRequired):
        return Problem(422, "reason-required", _sentence(str(exc)), field="reason")
    if isinstance(exc, NarrowingRefused):
        return Problem(422, "not-narrower", _sentence(str(exc)), field="changes")
    if isinstance(exc, (DecisionRefused, RunRefused, SteerRefused)):
        return Problem(409, "conflict", _sentence(str(exc)))
    return None


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def _on_problem(request: HttpRequest, exc: Any) -> HttpResponse:
    problem = as_problem(exc)
    if problem is None:
        raise exc
    return problem_response(request, problem)


for _kind in (Problem, NotVisible, NotAllowed, DecisionRefused, RunRefused, SteerRefused):
    api.add_exception_handler(_kind, _on_problem)
api.add_exception_handler(NarrowingRefused, _on_problem)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    problem = Problem(
        401,
        "unauthenticated",
        "Send an active API key of your merchant as 'Authorization: Bearer <key>'.",
        headers={"WWW-Authenticate": 'Bearer realm="deskhand"'},
    )
    return problem_response(request, problem)


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = [e for e in exc.errors if isinstance(e, dict)]
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "payload", "query", "path")]
    where = next((str(p) for p in first.get("loc", ()) if p in ("body", "query", "path")), "")
    field = ".".join(loc) or where
    message = str(first.get("msg", "is not valid")).rstrip(".")
    if first.get("type") in ("json_invalid", "model_attributes_type"):
        return problem_response(
            request, Problem(400, "bad-json", "The body must be a JSON object.", field="body")
        )
    detail = f"{field or 'The request'}: {message[:200]}."
    return problem_response(
        request,
        Problem(
            422,
            "invalid",
            detail,
            field=field,
            extra={"errors": [_error(e) for e in errors[:20]]},
        ),
    )


def _error(e: dict[str, Any]) -> dict[str, str]:
    loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "payload", "query", "path")]
    return {"field": ".".join(loc), "detail": str(e.get("msg", ""))[:200]}


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    status = exc.status_code if 400 <= exc.status_code < 500 else 400
    detail = _sentence(str(exc) or "The request was refused")
    name = "bad-json" if "parse" in detail.lower() else "refused"
    return problem_response(request, Problem(status, name, detail))


# --- who acts --------------------------------------------------------------------


def key_of(request: HttpRequest) -> ApiKey:
    key = getattr(request, "auth", None)
    assert isinstance(key, ApiKey)
    return key


def require_scope(request: HttpRequest, scope: str) -> ApiKey:
    key = key_of(request)
    if not key.allows(scope):
        raise Problem(
            403,
            "scope",
            f"Key {key.label} has scopes {', '.join(key.scopes)}; this needs the '{scope}' scope.",
        )
    return key


def key_person(key: ApiKey, action: str) -> Any:
    """The person a key's writes are recorded under: the owner who made it, while they may act."""
    if key.created_by is None:
        raise Problem(
            403, "not-allowed", f"The person who made key {key.label} is gone; make a new key."
        )
    require_actor(key.created_by, key.merchant_id, action)
    return key.created_by


def member_for(key: ApiKey, email: str) -> Any:
    """The member a decision is named for (by email), at the key's merchant, or a 422."""
    membership = (
        Membership.objects.filter(merchant_id=key.merchant_id, user__email__iexact=email.strip())
        .select_related("user")
        .first()
    )
    if membership is None:
        raise Problem(
            422,
            "unknown-member",
            f"{email.strip()[:80]!r} is not a member of {key.merchant.name}.",
            field="member",
        )
    user: Any = membership.user
    return user


def audit(
    request: HttpRequest, *, action: str, person: Any, run_id: Any = None, **detail: Any
) -> None:
    """Every write through the API is audited under the key's name, beside the person."""
    key = key_of(request)
    audit_record(
        merchant_id=key.merchant_id,
        actor=person,
        action=action[:40],
        run_id=run_id,
        channel=Channel.API,
        detail={"key": key.label, "key_id": key.pk, **detail},
    )


# --- Idempotency-Key -------------------------------------------------------------

Answer = tuple[int, Any, int | None]  # status, JSON-ready body, the customer it is about


def idempotent(request: HttpRequest, idempotency_key: str | None, act: Callable[[], Answer]) -> Any:
    """Run ``act`` once per idempotency key and body; a retry gets the first answer again."""
    if idempotency_key is None:
        status, body, _ = _answer(act)
        return _respond(request, status, body)
    if not store.key_valid(idempotency_key):
        raise Problem(
            400,
            "bad-idempotency-key",
            f"An Idempotency-Key is 1 to {store.KEY_MAX} visible ASCII characters "
            "(spaces only inside).",
            field="Idempotency-Key",
        )
    key = key_of(request)
    prints = store.fingerprints(request.method or "", request.path, request.body)
    try:
        claim = store.response_claim(key=key, idempotency_key=idempotency_key, prints=prints)
    except store.OtherBody:
        raise Problem(
            422,
            "idempotency-key-reused",
            "This Idempotency-Key was first sent with another request; use a new key.",
            field="Idempotency-Key",
        ) from None
    except store.StillRunning:
        raise Problem(
            409,
            "idempotency-key-in-progress",
            "The first request with this Idempotency-Key is still being answered; retry shortly.",
            field="Idempotency-Key",
            headers={"Retry-After": "1"},
        ) from None
    if not claim.mine:
        response = _respond(request, claim.row.status_code or 200, claim.row.body)
        response["Idempotent-Replayed"] = "true"
        if claim.row.status_code and claim.row.status_code < 300:
            response.status_code = 200  # a replay: nothing new was created
        return response
    try:
        status, body, customer_id = _answer(act)
    except Exception:
        store.response_release(claim)
        raise
    store.response_record(claim, status=status, body=body, customer_id=customer_id)
    return _respond(request, status, body)


def _answer(act: Callable[[], Answer]) -> Answer:
    try:
        return act()
    except Exception as exc:
        problem = as_problem(exc)
        if problem is None:
            raise
        return problem.status, problem.body(), None


def _respond(request: HttpRequest, status: int, body: Any) -> HttpResponse:
    content_type = CONTENT_TYPE if status >= 400 else "application/json"
    response = HttpResponse(json.dumps(body), status=status, content_type=content_type)
    if status == 429:
        response["Retry-After"] = "1"
    return response
