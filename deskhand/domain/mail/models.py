"""Every inbound message, stored once, with what became of it.

An ``InboundEmail`` row is written before anything else happens to a message, so a crash
after the mail service or the sending server was told "accepted" loses nothing: the row is
there to be processed. It is unique per merchant by a keyed hash of the message's
Message-ID (the sender's text, which may carry personal data, is kept only in
``message_id`` and goes at erasure; the hash stays, so an erased message re-delivered is
still a duplicate and nothing erased comes back). Its primary key, never the Message-ID,
is what any workflow processing it is named by.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from deskhand.domain.desk.models import Customer, Merchant, SupportAddress, Ticket, TicketMessage


class InboundSource(models.TextChoices):
    SMTP = "smtp", "SMTP receiver"
    MAILGUN = "mailgun", "Mailgun webhook"


class InboundStatus(models.TextChoices):
    RECEIVED = "received", "stored, not processed yet"
    THREADED = "threaded", "on a ticket's thread"
    IGNORED = "ignored", "stored, on no thread"
    QUARANTINED = "quarantined", "held: failed the sender checks or over a limit"
    REJECTED = "rejected", "refused: no merchant, too large or unreadable"


class Automated(models.TextChoices):
    """Why a machine, not a person, wrote a message (RFC 3834 and practice)."""

    NONE = "", "a person"
    AUTO_REPLY = "auto-reply", "automatic reply"
    BOUNCE = "bounce", "delivery report (bounce)"
    BULK = "bulk", "bulk or list mail"


class InboundEmail(models.Model):
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    source = models.CharField(max_length=16, choices=InboundSource.choices)
    # The merchant whose support address it was sent to (None: no merchant owns it).
    merchant = models.ForeignKey(
        Merchant, null=True, blank=True, on_delete=models.CASCADE, related_name="inbound_emails"
    )
    support_address = models.ForeignKey(
        SupportAddress, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The address it was routed by, as written (a +tag is a reply token).
    recipient = models.CharField(max_length=320, blank=True, default="")
    # SMTP's MAIL FROM: "" is the null reverse-path (only bounces use it); None: not given.
    envelope_sender = models.CharField(max_length=320, null=True, blank=True, default=None)  # noqa: DJ001
    envelope_recipients = ArrayField(models.CharField(max_length=320), default=list, blank=True)
    from_address = models.CharField(max_length=320, blank=True, default="")
    subject = models.CharField(max_length=300, blank=True, default="")
    message_id = models.TextField(blank=True, default="")
    message_id_hash = models.CharField(max_length=64)
    # No Message-ID header: one was made from a hash of the raw bytes.
    message_id_derived = models.BooleanField(default=False)
    raw = models.BinaryField(default=b"")
    raw_size = models.PositiveBigIntegerField(default=0)
    raw_sha256 = models.CharField(max_length=64, blank=True, default="")
    # Over the size limit: only the first bytes are kept (enough for the headers).
    raw_truncated = models.BooleanField(default=False)
    # The verdicts it was given (by the mail service, or a trusted Authentication-Results
    # header); empty: none given.
    spf = models.CharField(max_length=16, blank=True, default="")
    dkim = models.CharField(max_length=16, blank=True, default="")
    dmarc = models.CharField(max_length=16, blank=True, default="")
    status = models.CharField(
        max_length=12, choices=InboundStatus.choices, default=InboundStatus.RECEIVED
    )
    reason_code = models.CharField(max_length=32, blank=True, default="")
    # One sentence for a person; never carries an address or the message's words.
    reason = models.TextField(blank=True, default="")
    automated = models.CharField(
        max_length=16, choices=Automated.choices, blank=True, default=Automated.NONE
    )
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    customer = models.ForeignKey(
        Customer, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    thread_message = models.OneToOneField(
        TicketMessage,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="inbound_email",
    )
    opened_ticket = models.BooleanField(default=False)
    processed_at = models.DateTimeField(null=True, blank=True)
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "message_id_hash"],
                nulls_distinct=False,
                name="inbound_once_per_merchant",
            )
        ]
        indexes = [
            models.Index(fields=["merchant", "from_address", "received_at"]),
            models.Index(fields=["support_address", "received_at"]),
            models.Index(
                fields=["received_at"],
                condition=Q(status="received"),
                name="inbound_waiting",
            ),
        ]

    def __str__(self) -> str:
        return f"inbound mail {self.pk} ({self.status})"

    @property
    def starts_no_run(self) -> bool:
        """Stored, but a reason not to act on it: a machine wrote it, or it is not on a thread."""
        return bool(self.automated) or self.status != InboundStatus.THREADED


class InboundAttachment(models.Model):
    """A file that came with a message: kept by name, type and size, its bytes up to a limit.

    Never part of what the model reads: the thread shows that it exists, a person opens it.
    """

    inbound = models.ForeignKey(InboundEmail, on_delete=models.CASCADE, related_name="attachments")
    filename = models.CharField(max_length=255, blank=True, default="")
    content_type = models.CharField(max_length=127)
    size = models.PositiveBigIntegerField()
    # None: larger than the per-attachment limit, so only its facts were kept.
    content = models.BinaryField(null=True, blank=True)
    inline = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.filename or '(unnamed)'} ({self.content_type}, {self.size} bytes)"

    @property
    def kept(self) -> bool:
        return self.content is not None
