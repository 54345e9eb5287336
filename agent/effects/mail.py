"""The mail adapter: customer email through a mail server (SMTP, Django's email framework).

SMTP has no idempotency key and no way to ask a server what it delivered, so mail is
**at least once**: the claim is committed first (with the message's ``Message-ID``, fixed
at claim time from the ledger key), then the message is handed to the server, then the
result is recorded. A worker killed after the server accepted the message and before the
result was recorded re-executes the step, finds the pending claim and sends again — the
same message with the same ``Message-ID``, which receiving systems use to fold
duplicates. At most one extra copy per crash; never a different message.

The password comes from the environment (``config.smtp``) and is never part of an error
the model, a log line or a step row sees (``config.redact``).
"""

from __future__ import annotations

import hashlib
import smtplib
from email.headerregistry import Address
from typing import Any

from django.core.mail import EmailMessage
from django.core.mail.backends.smtp import EmailBackend

from agent.effects import config
from agent.effects.base import Outcome, Retry, with_retries
from agent.models.ledger import LedgerEntry
from agent.tools.irreversible import asked_result, email_result, reply_result, ticket_email_send
from agent.tools.reads import run_ticket
from agent.tools.registry import ToolContext, ToolError
from deskhand.domain.desk import services, thread
from deskhand.domain.desk.models import Ticket
from deskhand.domain.desk.subjects import reply_subject

NAME = "smtp"
REPLY = "reply_to_customer"
ASK = "ask_customer"
# Words to the customer on the ticket's thread: threaded, signed, capped per day.
THREAD_REPLIES = (REPLY, ASK)


def message_id(ledger_key: str, domain: str) -> str:
    """One ``Message-ID`` per ledger claim: every copy of the message carries it."""
    return f"<{hashlib.sha256(ledger_key.encode()).hexdigest()[:32]}.deskhand@{domain}>"


def _ticket(entry: LedgerEntry) -> Ticket:
    args = entry.arguments if isinstance(entry.arguments, dict) else {}
    return Ticket.objects.select_related("customer", "merchant").get(
        merchant_id=entry.merchant_id, reference=args.get("reference")
    )


def _words(tool: str, args: Any) -> str:
    """What a reply or a question says (its argument's name differs)."""
    return str((args or {}).get("question" if tool == ASK else "body", ""))


def _send(cfg: config.SmtpConfig, msg: EmailMessage) -> None:
    backend = EmailBackend(
        alias="deskhand-customer-mail",
        host=cfg.host,
        port=cfg.port,
        username=cfg.username or None,
        password=cfg.password or None,
        use_tls=cfg.starttls and not cfg.ssl,
        use_ssl=cfg.ssl,
        timeout=cfg.timeout_seconds,
        fail_silently=False,
    )
    backend.send_messages([msg])


def _smtp_failure(exc: Exception) -> Outcome:
    """A refusal that will not change on a retry is an outcome; anything else raises ``Retry``."""
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return Outcome(
            "failed", code="smtp_auth", reason="the mail server refused Deskhand's login"
        )
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [c for c, _ in exc.recipients.values()]
        if codes and all(c >= 500 for c in codes):
            return Outcome("failed", code=f"smtp_{codes[0]}", reason="the recipient was refused")
        raise Retry(f"recipient deferred ({codes})")
    if isinstance(exc, smtplib.SMTPResponseException):
        text = config.redact(
            exc.smtp_error.decode(errors="replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        if exc.smtp_code >= 500:
            return Outcome("failed", code=f"smtp_{exc.smtp_code}", reason=text[:300])
        raise Retry(f"{exc.smtp_code} {text[:200]}")
    # Disconnected, refused, timed out: the server may or may not have taken the message.
    raise Retry(f"no answer from the mail server ({type(exc).__name__})")


class SmtpAdapter:
    """Customer email through the merchant's mail server (``Merchant.mail_adapter == "smtp"``)."""

    name = NAME

    def prepare(self, ctx: ToolContext, args: dict[str, Any], entry: LedgerEntry) -> None:
        ticket = run_ticket(ctx, args["reference"])
        try:
            if entry.tool in THREAD_REPLIES:
                services.customer_reply_check(ticket=ticket, body=_words(entry.tool, args))
            else:
                services.email_check(subject=args["subject"], body=args["body"])
            cfg = config.smtp()
        except services.DomainError as exc:
            raise ToolError(str(exc)) from None
        except config.NotConfigured as exc:
            raise ToolError(f"{exc}; nothing was sent") from None
        # Fixed at claim time, so every copy carries it whatever the configuration says later.
        sender = thread.merchant_support_address(ticket) or cfg.mail_from
        entry.provider_ref = message_id(entry.key, sender.rpartition("@")[2] or cfg.domain)

    def _message(self, entry: LedgerEntry, ticket: Ticket, cfg: config.SmtpConfig) -> EmailMessage:
        """The message as it leaves: from the merchant's support address, under its name.

        Every kind is threaded the same way (``In-Reply-To`` the customer's last message,
        ``References`` the chain, ``Re:`` their subject once with the ticket's tag), signed,
        its ``Reply-To`` carrying the ticket's reply token; all say
        ``Auto-Submitted: auto-replied`` so a well-behaved autoresponder stays quiet.
        """
        to = [str(Address(display_name=ticket.customer.name, addr_spec=ticket.customer.email))]
        headers = {
            "Message-ID": entry.provider_ref,
            "X-Deskhand-Ticket": ticket.reference,
            "Auto-Submitted": "auto-replied",
        }
        if entry.tool in THREAD_REPLIES:
            body = _words(entry.tool, entry.arguments)
        else:
            _, body = services.email_check(
                subject=entry.arguments["subject"], body=entry.arguments["body"]
            )
        h = thread.reply_headers(ticket)
        sender = Address(display_name=h.from_name, addr_spec=h.from_address or cfg.mail_from)
        if h.in_reply_to:
            headers["In-Reply-To"] = h.in_reply_to
            headers["References"] = h.references
        return EmailMessage(
            subject=reply_subject(h.subject)[: services.SUBJECT_MAX_CHARS],
            body=thread.signed(body, ticket.merchant.name),
            from_email=str(sender),
            to=to,
            reply_to=[h.reply_to] if h.reply_to else None,
            headers=headers,
        )

    def perform(self, entry: LedgerEntry) -> Outcome:
        ticket = _ticket(entry)
        try:
            cfg = config.smtp()
        except config.NotConfigured as exc:
            return Outcome("unknown", code="not_configured", reason=str(exc))
        msg = self._message(entry, ticket, cfg)

        def attempt() -> Outcome:
            try:
                _send(cfg, msg)
            except (smtplib.SMTPException, OSError) as exc:
                return _smtp_failure(exc)
            return Outcome("done", provider_ref=entry.provider_ref)

        return with_retries(attempt)

    def find(self, entry: LedgerEntry) -> Outcome:
        return Outcome(
            "unknown",
            code="no_lookup",
            reason="a mail server cannot be asked whether it delivered a message",
        )

    def may_resend(self, entry: LedgerEntry) -> bool:
        return True  # at least once, under the same Message-ID

    def record(self, entry: LedgerEntry, outcome: Outcome) -> tuple[str, bool]:
        ticket = _ticket(entry)
        to = f"{ticket.customer.name} <{ticket.customer.email}>"
        if outcome.state == "done" and entry.tool in THREAD_REPLIES:
            reply = services.customer_reply_send(
                ticket=ticket,
                body=_words(entry.tool, entry.arguments),
                run_id=entry.run_id,
                ledger_entry_id=entry.pk,
                message_id=entry.provider_ref,
            )
            said = asked_result if entry.tool == ASK else reply_result
            return said(ticket, reply).text, True
        if outcome.state == "done":
            email = ticket_email_send(
                ticket=ticket,
                body=entry.arguments["body"],
                run_id=entry.run_id,
                ledger_entry_id=entry.pk,
                message_id=entry.provider_ref,
            )
            return email_result(ticket, email).text, True
        if outcome.state == "failed":
            return (
                f"The mail server refused the email to {to} about {ticket.reference}: "
                f"{outcome.reason} [{outcome.code}]. It was not sent.",
                False,
            )
        return (
            f"The mail server did not confirm the email to {to} about {ticket.reference} "
            f"({outcome.reason}). It may have been delivered; any further copy carries the same "
            f"Message-ID {entry.provider_ref}. Do not send it again.",
            False,
        )
