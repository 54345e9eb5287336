"""Approvals: the pending ones beside the order they name, one in full, and a decision.

A key alone never consents: ``decide`` names the member it is for (``member``, an owner
or agent of the key's merchant), the decision is recorded as theirs, and the API's audit
event names the key beside them.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Router

from agent.tools.narrowing import approval_approve_with_changes
from approvals.models import Channel
from approvals.services import approval_decide
from deskhand.domain.apikeys.models import Scope
from deskhand.domain.desk.permissions import NotAllowed, NotVisible, require_actor
from deskhand.web.api import present, schemas
from deskhand.web.api.core import audit, idempotent, member_for, require_scope
from deskhand.web.api.problems import Problem, not_found
from deskhand.web.api.tickets import IdempotencyKey
from deskhand.web.console import selectors

router = Router(tags=["approvals"])


def approval_of(request: HttpRequest, approval_id: uuid.UUID) -> Any:
    key = request.auth  # type: ignore[attr-defined]
    found = selectors.approval_get(merchant_id=key.merchant_id, approval_id=approval_id)
    if found is None:
        raise not_found("approval")
    return found


@router.get("/approvals", response=schemas.ApprovalPage, summary="Pending approvals, oldest first")
def approval_list(request: HttpRequest) -> Any:
    key = require_scope(request, Scope.READ)
    pending = selectors.pending_approvals(merchant_id=key.merchant_id)
    return {"items": [present.approval(i.approval, i.order) for i in pending]}


@router.get(
    "/approvals/{approval_id}",
    response=schemas.ApprovalOut,
    summary="An approval, with the facts of the order it names",
)
def approval_get(request: HttpRequest, approval_id: uuid.UUID) -> Any:
    require_scope(request, Scope.READ)
    return present.approval_out(approval_of(request, approval_id))


@router.post(
    "/approvals/{approval_id}/decide",
    response={201: schemas.ApprovalOut},
    summary="Approve, deny (with a reason) or approve a narrower call, for a named member",
)
def approval_decide_op(
    request: HttpRequest,
    approval_id: uuid.UUID,
    payload: schemas.DecideIn,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    key = require_scope(request, Scope.DECIDE)
    approval = approval_of(request, approval_id)

    def act() -> tuple[int, Any, int | None]:
        member = member_for(key, payload.member)
        try:
            require_actor(member, key.merchant_id, "approve or deny irreversible actions")
        except (NotAllowed, NotVisible) as exc:
            raise Problem(403, "not-allowed", str(exc).rstrip(".") + ".", field="member") from None
        if payload.changes and payload.decision != "approve":
            raise Problem(
                422,
                "invalid",
                "A denial approves nothing, so it cannot change the call.",
                field="changes",
            )
        if payload.changes:
            decided = approval_approve_with_changes(
                approval=approval,
                user=member,
                changes=payload.changes,
                reason=payload.reason,
                channel=Channel.API,
            )
        else:
            decided = approval_decide(
                approval=approval,
                user=member,
                approve=payload.decision == "approve",
                reason=payload.reason,
                channel=Channel.API,
            )
        audit(
            request,
            action="api.approval.decide",
            person=member,
            run_id=decided.run_id,
            approval=str(decided.pk),
            decision=decided.status,
        )
        decided.refresh_from_db()
        body = present.approval_out(decided)
        return 201, body, approval.run.ticket.customer_id

    return idempotent(request, idempotency_key, act)
