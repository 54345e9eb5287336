"""The support domain: tenants, their people, customers, orders, tickets, KB.

Money is integer cents everywhere; no float ever touches it. Every row that
belongs to a merchant carries the merchant so that every query can be scoped.

Over 400 lines because a ticket's thread (messages, support addresses) and the merchant's
settings for it belong with the tickets and customers they refer to; split by table they
would import each other.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce, Lower


class RefundAdapter(models.TextChoices):
    """Where a merchant's refunds are made (``agent.effects``)."""

    DATABASE = "database", "in this database (demo)"
    PAYMENTS = "payments", "payment provider (Stripe-style refunds API)"


class MailAdapter(models.TextChoices):
    """How a merchant's customer emails leave (``agent.effects``)."""

    DATABASE = "database", "in this database (demo outbox)"
    SMTP = "smtp", "mail server (SMTP)"


class OrderSourceKind(models.TextChoices):
    """Where a merchant's orders are read from (``deskhand.domain.desk.orders``).

    ``local`` and ``pushed`` are rows of this database's ``Order`` table (its ``source``
    column says which); ``shopify`` is read from the store's Admin API when a run needs it.
    """

    LOCAL = "local", "in Deskhand's own tables (the demo, the seed)"
    SHOPIFY = "shopify", "Shopify, read from the store's Admin API"
    PUSHED = "pushed", "pushed by the store's own system (PUT /api/v1/orders, CSV import)"


class AutoRuns(models.TextChoices):
    """When a customer's message starts a run by itself (phase 2 of the thread reads it)."""

    OFF = "off", "never: a person starts every run"
    NEW_TICKETS = "new_tickets", "on a new ticket"
    EVERY_MESSAGE = "every_message", "on every customer message"


class Merchant(models.Model):
    """A tenant. Its policy settings are what bounds and gates read.

    The adapters say where its irreversible effects happen. They name a kind of system,
    never a credential: keys and passwords come from the environment (``agent.effects.config``).

    The conversation settings bound what the desk does with customers' mail: when a message
    starts a run, how long a run waits for a customer's answer, how many messages one
    customer may be sent per ticket a day (two bots must never loop), and how much inbound
    mail one sender or one support address may bring in an hour.
    """

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    approval_ttl_seconds = models.PositiveIntegerField(default=24 * 3600)
    approval_sla_seconds = models.PositiveIntegerField(default=4 * 3600)
    daily_spend_cap_micros = models.BigIntegerField(default=10_000_000)
    daily_refund_ceiling_cents = models.BigIntegerField(default=100_000)
    run_refund_ceiling_cents = models.BigIntegerField(default=25_000)
    refund_adapter = models.CharField(
        max_length=12,
        choices=RefundAdapter.choices,
        default=RefundAdapter.DATABASE,
        db_default=RefundAdapter.DATABASE,
    )
    mail_adapter = models.CharField(
        max_length=12,
        choices=MailAdapter.choices,
        default=MailAdapter.DATABASE,
        db_default=MailAdapter.DATABASE,
    )
    # How long a finished run keeps its words (step payloads, transcripts, DBOS history);
    # the money facts are kept regardless (``agent.privacy.retention``).
    retention_days = models.PositiveIntegerField(default=365, db_default=365)
    # New tickets are numbered <prefix>-<n> ("NW-12"); empty: the slug's first letters.
    ticket_prefix = models.CharField(max_length=8, blank=True, default="", db_default="")
    auto_runs = models.CharField(
        max_length=16, choices=AutoRuns.choices, default=AutoRuns.OFF, db_default=AutoRuns.OFF
    )
    reply_window_seconds = models.PositiveIntegerField(default=72 * 3600, db_default=72 * 3600)
    reply_reminder = models.BooleanField(default=False, db_default=False)
    max_customer_messages_per_day = models.PositiveIntegerField(default=5, db_default=5)
    inbound_per_sender_per_hour = models.PositiveIntegerField(default=20, db_default=20)
    inbound_per_address_per_hour = models.PositiveIntegerField(default=600, db_default=600)
    # Where the agent, the ticket page and the refund ceilings read orders. A run keeps the
    # source it started with (``agent.models.Run.order_source``): changing it never changes
    # the facts under a run or an approval already in flight.
    order_source = models.CharField(
        max_length=8,
        choices=OrderSourceKind.choices,
        default=OrderSourceKind.LOCAL,
        db_default=OrderSourceKind.LOCAL,
    )

    def __str__(self) -> str:
        return self.name

    @classmethod
    def locked(cls, pk: int) -> Merchant:
        """The merchant, its row locked until the transaction ends (call inside one).

        The lock serialises what must happen one at a time per merchant: a new customer per
        address, the next ticket number, a policy version, the order inbound mail is
        threaded in. It is ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: every insert of a row
        that points at the merchant (a stored message, a run, a step) checks its foreign key
        with ``FOR KEY SHARE``, which ``FOR UPDATE`` blocks. Under a burst of mail the
        receiver's store waited for the worker's threading batch (p95 466 ms); with this
        lock it waits for nothing (docs/benchmarks.md, inbound).
        """
        return cls.objects.select_for_update(no_key=True).get(pk=pk)

    @property
    def reference_prefix(self) -> str:
        return self.ticket_prefix or self.slug[:3].upper()


class SupportAddress(models.Model):
    """An address customers write to; mail to it belongs to this merchant and no other.

    Unique across merchants whatever the case (``Support@`` is ``support@``): the address
    is how inbound mail finds its merchant. ``primary`` is the one replies come from when
    a conversation did not start at another of the merchant's addresses.
    """

    merchant = models.ForeignKey(
        Merchant, on_delete=models.CASCADE, related_name="support_addresses"
    )
    address = models.EmailField(max_length=254)
    primary = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When a routing check came back through intake (``AddressCheck``). Until then mail to
    # the address opens no ticket: it is held, so a typo or a half-set-up route is seen.
    verified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "support addresses"
        constraints = [
            models.UniqueConstraint(Lower("address"), name="support_address_unique_ci"),
            models.UniqueConstraint(
                fields=["merchant"],
                condition=Q(primary=True),
                name="one_primary_support_address",
            ),
        ]

    def __str__(self) -> str:
        return self.address


class AddressCheck(models.Model):
    """A routing check: a message with a one-time token sent to a support address.

    It proves the mail server routes the address to Deskhand when it comes back in through
    intake (``returned_at``); that verifies the address. Only the token's sha256 is kept.
    The check message itself never becomes a ticket.
    """

    address = models.ForeignKey(SupportAddress, on_delete=models.CASCADE, related_name="checks")
    token_hash = models.CharField(max_length=64, unique=True)
    sent_at = models.DateTimeField(auto_now_add=True)
    returned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["address", "sent_at"])]

    def __str__(self) -> str:
        return f"check of {self.address} at {self.sent_at:%Y-%m-%d %H:%M}"


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

    @property
    def is_owner(self) -> bool:
        return self.role == Role.OWNER

    @property
    def role_article(self) -> str:
        """The role with its article, for sentences: "an agent", "a viewer"."""
        return f"{'an' if self.role[0] in 'aeiou' else 'a'} {self.role}"


class Invitation(models.Model):
    """An owner's (or the operator's) offer of a role at the merchant to one email address.

    The link's token is random (256 bits) and only its sha256 is kept here (``token_hash``):
    someone who reads the database cannot accept an invitation. It is single use
    (``accepted_at``), expires (``expires_at``, ``DESKHAND_INVITATION_DAYS``), can be
    revoked (``revoked_at``), and a resend gives it a new token — the old link stops working.
    ``approvals.team`` is what issues, sends and accepts them.
    """

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)  # lower case
    role = models.CharField(max_length=10, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    # Who invited: a member, or nobody (the deployment's operator, ``manage.py merchant``).
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    invited_by_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "merchant",
                Lower("email"),
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="one_open_invitation_per_address",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} → {self.merchant.slug} ({self.role})"

    def refusal(self, now: dt.datetime) -> str:
        """Why this invitation can no longer be accepted, or "" while it can."""
        if self.accepted_at is not None:
            return "This invitation has already been accepted."
        if self.revoked_at is not None:
            return "This invitation was withdrawn. Ask the merchant's owner for a new one."
        if now >= self.expires_at:
            return "This invitation has expired. Ask the merchant's owner to send it again."
        return ""


class Customer(models.Model):
    """A merchant's customer. An erased one keeps its row (orders and refunds hang off it)
    under a pseudonym, with ``erased_at`` saying when (``agent.privacy.erasure``)."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="customers")
    name = models.CharField(max_length=200)
    email = models.EmailField()
    erased_at = models.DateTimeField(null=True, blank=True)

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
    """An order of the merchant's, as this database holds it.

    ``source`` says how it got here: ``local`` (made in Deskhand: the seed, the demo) or
    ``pushed`` (sent by the store's own system, ``deskhand.domain.desk.pushed``), where
    ``version`` is the store's own revision number: a push older than the stored one never
    overwrites it. A merchant reads only the rows of its order source (``orders``).
    """

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
    # The charge at the payment provider that a refund through the payments adapter is made
    # against (e.g. ``ch_…``). Empty: the order was not paid through the provider.
    payment_reference = models.CharField(max_length=100, blank=True, default="", db_default="")
    cancel_ledger_entry = models.OneToOneField(
        "agent.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="cancelled_order",
    )
    source = models.CharField(
        max_length=8,
        choices=OrderSourceKind.choices,
        default=OrderSourceKind.LOCAL,
        db_default=OrderSourceKind.LOCAL,
    )
    version = models.BigIntegerField(default=0, db_default=0)
    pushed_at = models.DateTimeField(null=True, blank=True)

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


class RefundStatus(models.TextChoices):
    # Claimed and sent (or about to be) to the payment provider, not yet confirmed. It counts
    # against every limit as if it had left: it may have.
    PENDING = "pending"
    SUCCEEDED = "succeeded"


class Refund(models.Model):
    """Money that left, or is leaving. Only ever created by the refund tool, beside its ledger entry.

    In-database refunds are ``succeeded`` at once. Through the payments adapter a refund is
    ``pending`` from the claim until the provider's answer is recorded: then ``succeeded`` with
    the provider's id, or deleted if the provider declined (no money moved; the ledger entry
    keeps the reason).
    """

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
    status = models.CharField(
        max_length=10,
        choices=RefundStatus.choices,
        default=RefundStatus.SUCCEEDED,
        db_default=RefundStatus.SUCCEEDED,
    )
    # The refund's id at the payment provider (``re_…``); empty for an in-database refund.
    provider_refund_id = models.CharField(max_length=100, blank=True, default="", db_default="")
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
    """Who speaks: the customer, the agent (a run), a person on staff, or nobody outside."""

    CUSTOMER = "customer"
    AGENT = "agent"
    STAFF = "staff", "staff reply"
    NOTE = "note", "internal note"


class MessageChannel(models.TextChoices):
    """How a message came in or went out. ``web`` is Deskhand itself (the console, a run's
    note); an API and help-desk connectors get their own so a thread says where each line
    was written."""

    EMAIL = "email"
    WEB = "web", "web console"
    API = "api", "API"
    HELPDESK = "helpdesk", "help desk"


class MessageDirection(models.TextChoices):
    INBOUND = "in", "from the customer"
    OUTBOUND = "out", "to the customer"
    INTERNAL = "internal", "internal"


class Routing(models.TextChoices):
    """What a customer's line did to runs (``TicketMessage.routing``); "" for lines no
    channel asked to route (the seed's, notes, what we sent)."""

    PENDING = "pending", "not routed yet"
    WOKE = "woke", "woke the run waiting for the customer"
    OPENED = "opened", "opened a run"
    NONE = "none", "started nothing"


class TicketMessage(models.Model):
    """One line of a ticket's thread: the customer's words, what they were told, staff notes.

    ``body`` is what a reader (a person, or the model) sees: for an email from the customer,
    the new text with the quoted history trimmed and HTML turned into text; ``body_full`` keeps
    the whole text when the two differ. The mail headers (``message_id``, ``in_reply_to``,
    ``references``) are what replies are threaded by. A message that went out as an email
    points at its outbox row (``email``), which stays the record of the effect itself.
    """

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="messages")
    kind = models.CharField(max_length=10, choices=MessageKind.choices)
    channel = models.CharField(
        max_length=10,
        choices=MessageChannel.choices,
        default=MessageChannel.WEB,
        db_default=MessageChannel.WEB,
    )
    direction = models.CharField(
        max_length=8,
        choices=MessageDirection.choices,
        default=MessageDirection.INTERNAL,
        db_default=MessageDirection.INTERNAL,
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    subject = models.CharField(max_length=300, blank=True, default="", db_default="")
    body = models.TextField()
    body_full = models.TextField(blank=True, default="", db_default="")
    from_address = models.CharField(max_length=320, blank=True, default="", db_default="")
    to_address = models.CharField(max_length=320, blank=True, default="", db_default="")
    message_id = models.CharField(max_length=250, blank=True, default="", db_default="")
    in_reply_to = models.CharField(max_length=250, blank=True, default="", db_default="")
    references = models.TextField(blank=True, default="", db_default="")
    # Why a machine wrote it ("auto-reply", "bulk"): stored and shown, never a reason to run.
    automated = models.CharField(max_length=16, blank=True, default="", db_default="")
    email = models.OneToOneField(
        "OutboundEmail",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="thread_message",
    )
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Inbound: the Date the sender's mail claims (``sent_at``) and when it reached us
    # (``received_at``). Outbound: when it left.
    sent_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # A customer's line comes in ``pending``; once routed (``agent.customer.route``) it says
    # what it did to runs, written in the routing transaction. The sweep re-drives a line
    # still pending after a grace period.
    routed_at = models.DateTimeField(null=True, blank=True)
    routing = models.CharField(
        max_length=8, choices=Routing.choices, blank=True, default="", db_default=""
    )
    routing_detail = models.CharField(max_length=300, blank=True, default="", db_default="")
    routed_run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # Processing an inbound mail twice, or recording a sent one twice, adds one line.
            models.UniqueConstraint(
                fields=["ticket", "message_id"],
                condition=~Q(message_id=""),
                name="thread_message_id_once_per_ticket",
            )
        ]
        indexes = [
            models.Index(
                fields=["message_id"], condition=~Q(message_id=""), name="thread_message_id"
            ),
            # The sweep's question, "lines not routed yet": small, whatever the threads' size.
            models.Index(
                fields=["created_at"],
                condition=Q(routing="pending"),
                name="thread_line_unrouted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} message on ticket {self.ticket_id}"


class OutboundEmail(models.Model):
    """The outbox of customer emails; a row here is an email that was sent.

    It stays the effect's own record (the ledger entry points here, claimed once); the
    ticket's thread shows it through the ``TicketMessage`` that points at it.
    """

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
    # The Message-ID it left with (stable per ledger entry: a re-send after a crash carries the
    # same one). Empty for an in-database email.
    message_id = models.CharField(max_length=250, blank=True, default="", db_default="")
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"email '{self.subject}'"


class KbArticle(models.Model):
    """A knowledge article the agent answers from: its current version, searchable.

    ``title`` and ``body`` are the current version's, the body as plain text (what the agent
    reads and search ranks); every version is kept in ``KbArticleVersion``, so a run that read
    version 3 can be replayed with version 3 after the article moved on. ``published`` is
    false for a draft: search never returns one. An imported article remembers where it came
    from (``source``, ``external_id``): importing the same export again changes nothing.
    """

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="kb_articles")
    slug = models.SlugField()
    title = models.CharField(max_length=200)
    body = models.TextField()
    published = models.BooleanField(default=True, db_default=True)
    version = models.PositiveIntegerField(default=1, db_default=1)
    # "console", "markdown", "zendesk", "intercom" (or "seed"); the id there, "" for console.
    source = models.CharField(max_length=16, default="console", db_default="console")
    external_id = models.CharField(max_length=200, blank=True, default="", db_default="")
    updated_at = models.DateTimeField(auto_now=True)
    search = models.GeneratedField(
        expression=SearchVector("title", weight="A", config="english")
        + SearchVector("body", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "slug"], name="kb_slug_per_merchant"),
            models.UniqueConstraint(
                fields=["merchant", "source", "external_id"],
                condition=~Q(external_id=""),
                name="kb_one_article_per_import_id",
            ),
        ]
        indexes = [GinIndex(fields=["search"], name="kb_search_gin")]

    def __str__(self) -> str:
        return self.title


class KbArticleVersion(models.Model):
    """One version of an article as written or imported (Markdown or HTML), never changed."""

    article = models.ForeignKey(KbArticle, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    source_text = models.TextField()  # as written: Markdown, or an export's HTML
    source_format = models.CharField(max_length=8)  # "markdown" or "html"
    body = models.TextField()  # the plain text the agent read
    published = models.BooleanField()
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by_name = models.CharField(max_length=254, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["article", "version"], name="kb_one_row_per_version")
        ]

    def __str__(self) -> str:
        return f"{self.article.slug} v{self.version}"
