"""Runs: start one on a ticket, list, read with its steps, cancel, steer — through
``agent.run.services`` and ``agent.run.steering``, as the console and ``manage.py`` do."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema

from agent.models import RunStatus, StopReason
from agent.run.services import run_cancel, run_start
from agent.run.steering import run_steer
from approvals.models import Channel
from deskhand.domain.apikeys.models import Scope
from deskhand.web.api import present, schemas
from deskhand.web.api.core import audit, idempotent, key_person, require_scope
from deskhand.web.api.problems import Problem, not_found
from deskhand.web.api.tickets import IdempotencyKey, ticket_of
from deskhand.web.console import selectors
from deskhand.web.console.selectors import BadCursor

router = Router(tags=["runs"])


class RunFilters(Schema):
    status: RunStatus | None = None
    stop_reason: StopReason | None = None
    cursor: schemas.Cursor = None
    limit: schemas.Limit = 50


def run_of(request: HttpRequest, run_id: uuid.UUID) -> Any:
    key = request.auth  # type: ignore[attr-defined]
    found = selectors.run_get(merchant_id=key.merchant_id, run_id=run_id)
    if found is None:
        raise not_found("run")
    return found


@router.post("/runs", response={201: schemas.RunDetail}, summary="Start a run on a ticket")
def run_create(
    request: HttpRequest, payload: schemas.RunIn, idempotency_key: IdempotencyKey = None
) -> Any:
    key = require_scope(request, Scope.WRITE)

    def act() -> tuple[int, Any, int | None]:
        ticket = ticket_of(request, payload.ticket)
        person = key_person(key, "start runs")
        run = run_start(ticket=ticket, user=person, channel=Channel.API)
        audit(
            request, action="api.run.start", person=person, run_id=run.pk, ticket=ticket.reference
        )
        found = selectors.run_get(merchant_id=key.merchant_id, run_id=run.pk)
        assert found is not None
        return 201, present.run_detail(found), ticket.customer_id

    return idempotent(request, idempotency_key, act)


@router.get("/runs", response=schemas.RunPage, summary="List runs, newest first")
def run_list(request: HttpRequest, filters: Query[RunFilters]) -> Any:
    key = require_scope(request, Scope.READ)
    try:
        page = selectors.runs_page(
            merchant_id=key.merchant_id,
            status=filters.status or "",
            stop_reason=filters.stop_reason or "",
            cursor=filters.cursor or "",
            limit=filters.limit,
        )
    except BadCursor:
        raise Problem(
            400,
            "bad-cursor",
            "The cursor is not one this API wrote; start again without it.",
            field="cursor",
        ) from None
    return {"items": [present.run(r) for r in page.rows], "next_cursor": page.next_cursor}


@router.get("/runs/{run_id}", response=schemas.RunDetail, summary="A run with its steps")
def run_get(request: HttpRequest, run_id: uuid.UUID) -> Any:
    require_scope(request, Scope.READ)
    return present.run_detail(run_of(request, run_id))


@router.post("/runs/{run_id}/cancel", response=schemas.RunDetail, summary="Cancel a run")
def run_cancel_op(request: HttpRequest, run_id: uuid.UUID) -> Any:
    key = require_scope(request, Scope.WRITE)
    run = run_of(request, run_id)
    person = key_person(key, "cancel runs")
    run_cancel(run=run, user=person, channel=Channel.API)
    audit(request, action="api.run.cancel", person=person, run_id=run.pk)
    return present.run_detail(run_of(request, run_id))


@router.post(
    "/runs/{run_id}/steer",
    response={201: schemas.RunDetail},
    summary="Leave a note the run reads at its next turn",
)
def run_steer_op(request: HttpRequest, run_id: uuid.UUID, payload: schemas.SteerIn) -> Any:
    key = require_scope(request, Scope.WRITE)
    run = run_of(request, run_id)
    if not payload.body.strip():
        raise Problem(422, "invalid", "body: a note needs some text.", field="body")
    person = key_person(key, "steer runs")
    note = run_steer(run=run, user=person, body=payload.body, channel=Channel.API)
    audit(request, action="api.run.steer", person=person, run_id=run.pk, note=note.pk)
    return 201, present.run_detail(run_of(request, run_id))
