"""Reversible tools: ticket housekeeping the agent may do without asking.

Each one acts only on the run's own ticket and returns the inverse that undoes
it (``None`` when nothing changed), which the step log keeps for the console's
undo. The writes themselves live in ``deskhand.domain.desk.services``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from agent.tools.reads import STRING, check_args, domain_errors, object_schema, outcome, run_ticket
from agent.tools.registry import Risk, ToolContext, ToolDef, ToolError, ToolOutcome
from deskhand.domain.desk import services
from deskhand.domain.desk.models import Priority, TicketStatus

MAX_TAGS = 8


@domain_errors
def tag_ticket(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"], thread=False)  # the write locks and reads it
    change = services.ticket_tag(ticket=ticket, tags=args["tags"])
    return outcome(
        {
            "reference": ticket.reference,
            "changed": change.changed,
            "tags": list(change.ticket.tags),
        },
        inverse=change.inverse,
    )


@domain_errors
def set_priority(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"], thread=False)  # the write locks and reads it
    change = services.ticket_set_priority(ticket=ticket, priority=args["priority"])
    return outcome(
        {
            "reference": ticket.reference,
            "changed": change.changed,
            "priority": change.ticket.priority,
        },
        inverse=change.inverse,
    )


@domain_errors
def set_ticket_status(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"], thread=False)  # the write locks and reads it
    change = services.ticket_set_status(ticket=ticket, status=args["status"])
    return outcome(
        {"reference": ticket.reference, "changed": change.changed, "status": change.ticket.status},
        inverse=change.inverse,
    )


@domain_errors
def assign_ticket(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"], thread=False)  # the write locks and reads it
    email = args["assignee_email"].strip()
    # Looked up among this merchant's members only: a person elsewhere is "no one".
    assignee = (
        User.objects.filter(email__iexact=email, memberships__merchant_id=ctx.merchant_id)
        .order_by("pk")
        .first()
    )
    if assignee is None:
        raise ToolError(f"no one at this merchant has the email '{email}'")
    change = services.ticket_assign(ticket=ticket, assignee=assignee)
    return outcome(
        {"reference": ticket.reference, "changed": change.changed, "assignee": assignee.email},
        inverse=change.inverse,
    )


@domain_errors
def add_internal_note(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"])
    change = services.ticket_note_add(ticket=ticket, body=args["body"], run_id=ctx.run_id)
    note_id = change.message.pk if change.message is not None else None
    return outcome(
        {"reference": ticket.reference, "changed": True, "note_id": note_id},
        inverse=change.inverse,
    )


def _check_tags(args: dict[str, Any]) -> None:
    check_args("tag_ticket", items={"tags": (1, MAX_TAGS)})(args)
    for tag in args["tags"]:
        if not 1 <= len(tag.strip()) <= services.TAG_MAX_CHARS:
            raise ToolError(
                f"invalid arguments for tag_ticket: each tag must be 1 to {services.TAG_MAX_CHARS} "
                f"characters long, not {tag!r}"
            )


TOOLS: list[ToolDef] = [
    ToolDef(
        name="tag_ticket",
        description=(
            "Add 1 to 8 tags to this run's ticket (lower-cased; existing tags are kept). Reversible."
        ),
        risk=Risk.REVERSIBLE,
        input_schema=object_schema(reference=STRING, tags={"type": "array", "items": STRING}),
        handler=tag_ticket,
        preview=lambda a, _currency: (
            f"Tag {a.get('reference')} with {', '.join(map(str, a.get('tags', [])))}"
        ),
        check=_check_tags,
    ),
    ToolDef(
        name="set_priority",
        description="Set the priority of this run's ticket. Reversible.",
        risk=Risk.REVERSIBLE,
        input_schema=object_schema(
            reference=STRING, priority={"type": "string", "enum": list(Priority.values)}
        ),
        handler=set_priority,
        preview=lambda a, _currency: f"Set {a.get('reference')} priority to {a.get('priority')}",
    ),
    ToolDef(
        name="set_ticket_status",
        description=(
            "Set the status of this run's ticket: pending (waiting on the customer or on time), "
            "resolved, or escalated (a person must take over). Reversible."
        ),
        risk=Risk.REVERSIBLE,
        input_schema=object_schema(
            reference=STRING, status={"type": "string", "enum": list(TicketStatus.values)}
        ),
        handler=set_ticket_status,
        preview=lambda a, _currency: f"Set {a.get('reference')} status to {a.get('status')}",
    ),
    ToolDef(
        name="assign_ticket",
        description="Assign this run's ticket to a person at this merchant, by their email. Reversible.",
        risk=Risk.REVERSIBLE,
        input_schema=object_schema(reference=STRING, assignee_email=STRING),
        handler=assign_ticket,
        preview=lambda a, _currency: f"Assign {a.get('reference')} to {a.get('assignee_email')}",
        check=check_args("assign_ticket", text={"assignee_email": (3, 254)}),
        unmasked=("assignee",),  # a staff member's work address, which the call named
    ),
    ToolDef(
        name="add_internal_note",
        description=(
            "Add an internal note to this run's ticket for staff (1 to 4000 characters). "
            "The customer never sees it. Reversible."
        ),
        risk=Risk.REVERSIBLE,
        input_schema=object_schema(reference=STRING, body=STRING),
        handler=add_internal_note,
        preview=lambda a, _currency: f"Add an internal note to {a.get('reference')}",
        wording=("body",),  # a note's words; which ticket it goes on is the decision
        check=check_args("add_internal_note", text={"body": (1, 4000)}),
    ),
]
