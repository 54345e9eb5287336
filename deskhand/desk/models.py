"""The support domain: tenants, their people, customers, orders, tickets, KB.

Money is integer cents everywhere; no float ever touches it. Every row that
belongs to a merchant carries the merchant so that every query can be scoped.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce


class Merchant(models.Model):
    """A tenant. Its policy settings are what bounds and gates read."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    approval_ttl_seconds = models.PositiveIntegerField(default=24 * 3600)
    approval_sla_seconds = models.PositiveIntegerField(default=4 * 3600)
    daily_spend_cap_micros = models.BigIntegerField(default=10_000_000)
    daily_refund_ceiling_cents = models.BigIntegerField(default=100_000)
    run_refund_ceiling_cents = models.BigIntegerField(default=25_000)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner"
    AGENT = "agent"
    VIEWER = "viewer"


class Membership(models.Model):
    """A user's role at one merchant. Owners and agents act; viewers watch."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.AGENT)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "merchant"], name="one_role_per_merchant")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.merchant.slug} ({self.role})"

    @property
    def can_act(self) -> bool:
        return self.role in (Role.OWNER, Role.AGENT)


class Customer(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="customers")
    name = models.CharField(max_length=200)
    email = models.EmailField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "email"], name="customer_email_per_merchant"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


class OrderStatus(models.TextChoices):
    PLACED = "placed"
    SHIPPED = "shipped"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


class Order(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="orders")
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="orders")
    reference = models.CharField(max_length=32)
    status = models.CharField(
        max_length=12, choices=OrderStatus.choices, default=OrderStatus.PLACED
    )
    total_cents = models.BigIntegerField()
    currency = models.CharField(max_length=3, default="USD")
    placed_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(blank=True)
    cancel_ledger_entry = models.OneToOneField(
        "agent.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="cancelled_order",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "reference"], name="order_ref_per_merchant"
            ),
            models.CheckConstraint(condition=Q(total_cents__gte=0), name="order_total_nonnegative"),
        ]

    def __str__(self) -> str:
        return self.reference

    def refunded_cents(self) -> int:
        return int(self.refunds.aggregate(t=Coalesce(Sum("amount_cents"), 0))["t"])

    def refundable_cents(self) -> int:
        return self.total_cents - self.refunded_cents()


class OrderItem(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    sku = models.CharField(max_length=40)
    description = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField()
    unit_price_cents = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku}"

    @property
    def line_cents(self) -> int:
        return self.quantity * self.unit_price_cents


class Refund(models.Model):
    """Money that left. Only ever created by the refund tool, beside its ledger entry."""

    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    amount_cents = models.BigIntegerField()
    currency = models.CharField(max_length=3, default="USD")
    reason = models.TextField()
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="refunds"
    )
    ledger_entry = models.OneToOneField(
        "agent.LedgerEntry", null=True, blank=True, on_delete=models.PROTECT, related_name="refund"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(amount_cents__gt=0), name="refund_positive")
        ]

    def __str__(self) -> str:
        return f"refund {self.amount_cents} cents on order {self.order_id}"


class TicketStatus(models.TextChoices):
    OPEN = "open"
    PENDING = "pending"
    RESOLVED = "resolved"
    ESCALATED = "escalated"


class Priority(models.TextChoices):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class Ticket(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="tickets")
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="tickets")
    reference = models.CharField(max_length=32)
    subject = models.CharField(max_length=300)
    status = models.CharField(
        max_length=12, choices=TicketStatus.choices, default=TicketStatus.OPEN
    )
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assigned_tickets",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "reference"], name="ticket_ref_per_merchant"
            )
        ]
        indexes = [models.Index(fields=["merchant", "status"])]

    def __str__(self) -> str:
        return self.reference


class MessageKind(models.TextChoices):
    CUSTOMER = "customer"
    AGENT = "agent"
    NOTE = "note", "internal note"


class TicketMessage(models.Model):
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="messages")
    kind = models.CharField(max_length=10, choices=MessageKind.choices)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    body = models.TextField()
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} message on ticket {self.ticket_id}"


class OutboundEmail(models.Model):
    """The outbox of customer emails; a row here is an email that was sent."""

    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="emails")
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="emails")
    ticket = models.ForeignKey(Ticket, null=True, on_delete=models.SET_NULL, related_name="emails")
    subject = models.CharField(max_length=200)
    body = models.TextField()
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="emails"
    )
    ledger_entry = models.OneToOneField(
        "agent.LedgerEntry", null=True, blank=True, on_delete=models.PROTECT, related_name="email"
    )
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"email '{self.subject}'"


class KbArticle(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="kb_articles")
    slug = models.SlugField()
    title = models.CharField(max_length=200)
    body = models.TextField()
    search = models.GeneratedField(
        expression=SearchVector("title", weight="A", config="english")
        + SearchVector("body", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "slug"], name="kb_slug_per_merchant")
        ]
        indexes = [GinIndex(fields=["search"], name="kb_search_gin")]

    def __str__(self) -> str:
        return self.title
