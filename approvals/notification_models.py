"""The notification outbox: who must be told that a person is needed, as rows.

Kept apart from ``approvals.models`` (which imports these, so Django finds them)
because they are plumbing for telling people, not the consent record itself.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class NotificationEvent(models.TextChoices):
    REQUESTED = "approval.requested"
    ESCALATED = "approval.escalated"
    EXPIRING = "approval.expiring"
    # A run ended (any terminal status): webhook only, for a chat bot or a help desk.
    RUN_FINISHED = "run.finished"
    # An invitation to a merchant's team: email only, to the invited address.
    INVITED = "team.invited"
    # A support address's routing check: email only, to the address itself.
    ADDRESS_CHECK = "address.check"
    # A person asked to reset their password: email only, to their account's address.
    PASSWORD_RESET = "account.password_reset"
    # Money went back on an order the store pushed: webhook only, so the store's own system
    # (which holds the order) learns of the refund Deskhand made (``notify_refunds_due``).
    REFUND_CREATED = "refund.created"


# The events a merchant's webhook receives (the API document's ``webhooks``); the others are
# mail to one person about their own part (an invitation, an address check, a password).
WEBHOOK_EVENTS = frozenset(
    {
        NotificationEvent.REQUESTED,
        NotificationEvent.ESCALATED,
        NotificationEvent.EXPIRING,
        NotificationEvent.RUN_FINISHED,
        NotificationEvent.REFUND_CREATED,
    }
)


class Transport(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


class Notification(models.Model):
    """One message to one recipient about one event, written in the event's own transaction.

    The worker's sweep sends it (``approvals.outbox``) and marks ``sent_at``; a failure
    is retried with backoff. A crash can fall between the receiver accepting it and the
    row being marked, so delivery is at least once: ``id`` is the stable ``Message-ID``
    of an email and the delivery id of a webhook, for the receiver to deduplicate.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The merchant it is about; none for mail about a person's own account (a password reset).
    merchant = models.ForeignKey(
        "desk.Merchant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    # What the event is about: an approval, or (``run.finished``) a run.
    approval = models.ForeignKey(
        "approvals.Approval",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    # ``refund.created``: the refund, made on an order the store pushed.
    refund = models.ForeignKey(
        "desk.Refund",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    # ``team.invited``: the invitation; ``address.check``: the routing check. Their one-time
    # secret is in ``payload["secret"]`` (the body says ``{secret}``) until the mail is sent,
    # then scrubbed (``approvals.outbox``): the token is kept nowhere else in clear.
    invitation = models.ForeignKey(
        "desk.Invitation",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="account_notifications",
    )
    address_check = models.ForeignKey(
        "desk.AddressCheck",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    event = models.CharField(max_length=24, choices=NotificationEvent.choices)
    transport = models.CharField(max_length=8, choices=Transport.choices)
    # An email address, or the webhook URL as configured when the event happened.
    recipient = models.CharField(max_length=500)
    subject = models.CharField(max_length=200, blank=True)
    body = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "event", "transport", "recipient"],
                name="one_notification_per_event_and_recipient",
            ),
            models.UniqueConstraint(
                fields=["run", "event", "transport", "recipient"],
                condition=models.Q(approval__isnull=True),
                name="one_run_notification_per_event_and_recipient",
            ),
            models.UniqueConstraint(
                fields=["refund", "event", "transport", "recipient"],
                condition=models.Q(refund__isnull=False),
                name="one_refund_notification_per_event_and_recipient",
            ),
            models.CheckConstraint(
                condition=models.Q(approval__isnull=False)
                | models.Q(run__isnull=False)
                | models.Q(refund__isnull=False)
                | models.Q(invitation__isnull=False)
                | models.Q(address_check__isnull=False)
                | models.Q(account__isnull=False),
                name="notification_is_about_something",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(sent_at__isnull=True),
                name="notification_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.recipient} ({'sent' if self.sent_at else 'pending'})"


class WebhookEndpoint(models.Model):
    """A merchant's optional chat-integration webhook: every notification event, signed.

    The body is JSON; ``X-Deskhand-Signature`` is ``sha256=<hex HMAC of "<timestamp>.<body>">``
    with ``secret`` and ``X-Deskhand-Timestamp``; ``X-Deskhand-Delivery`` is the
    notification id, the same on every retry (see docs/notifications.md).
    """

    merchant = models.OneToOneField(
        "desk.Merchant", on_delete=models.CASCADE, related_name="webhook"
    )
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200)
    active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"{self.url} ({'active' if self.active else 'off'})"


class WebhookDelivery(models.Model):
    """One attempt to deliver a webhook notification: the delivery log the admin shows."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    attempt = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["notification", "attempt"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"delivery {self.notification_id} attempt {self.attempt}: {'ok' if self.ok else 'failed'}"
