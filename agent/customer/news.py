"""Whether a reply would tell the customer anything: a run with nothing new sends nothing.

A re-run of a resolved ticket once mailed its customer "Thank you for your message about
NW-1; we have looked into it." (issue 40): no news and no question, approved by the
merchant's rule for replies, so no person read it first. A reply goes out when the customer
wrote since our last message to them (there is something to answer) or when this run did
something they should hear about (a refund, a cancellation). Otherwise the gate refuses it
before anyone is asked, for every provider, and the step says why.
"""

from __future__ import annotations

from agent.models import Run
from agent.models.ledger import LedgerEntry
from agent.tools.irreversible import REMINDER_CALL_SUFFIX
from deskhand.domain.desk.models import MessageDirection, MessageKind, TicketMessage

REPLY_TOOL = "reply_to_customer"
# Effects on the customer's money or orders: a run that made one has news for them.
NEWS_TOOLS = ("issue_refund", "cancel_order")

# The refusal as the model and the run's story read it (the story shows it whole).
NOTHING_SENT = "Nothing was sent to the customer"
NOTHING_NEW = (
    NOTHING_SENT + ": {customer} has written nothing since our last message on {reference}, "
    "and this run changed nothing they should hear about."
)


def reply_precheck(run: Run, call_id: str) -> str | None:
    """Why a reply from ``run`` would tell the customer nothing new, or ``None``.

    ``run``: read with its ticket. The reminder the wait sends on its own (its call id ends
    in ``REMINDER_CALL_SUFFIX``) follows up our own question and is never refused here.
    """
    if call_id.endswith(REMINDER_CALL_SUFFIX):
        return None
    ticket = run.ticket
    ours = (
        TicketMessage.objects.filter(ticket=ticket, direction=MessageDirection.OUTBOUND)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    if ours is None:
        return None  # never answered: the customer's first message is what there is to answer
    if TicketMessage.objects.filter(
        ticket=ticket, kind=MessageKind.CUSTOMER, automated="", id__gt=ours
    ).exists():
        return None
    if LedgerEntry.objects.filter(run=run, tool__in=NEWS_TOOLS, ok=True).exists():
        return None
    return NOTHING_NEW.format(customer=ticket.customer.name, reference=ticket.reference)
