"""Runs, their step log, and the idempotency ledger.

The step log is the audit trail *and* the live feed: the console reads the
same rows an auditor does. The ledger is the one thing standing between a
re-executed step and a second refund: a row is written in the same database
transaction as the effect it records.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"


OPEN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)
TERMINAL_STATUSES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.EXHAUSTED,
    RunStatus.CANCELLED,
)


class StopReason(models.TextChoices):
    END_TURN = "end_turn"
    STEP_CAP = "step_cap"
    TOKEN_CAP = "token_cap"
    SPEND_CAP = "spend_cap"
    DEADLINE = "deadline"
    MERCHANT_DAILY_SPEND = "merchant_daily_spend"
    PLATFORM_DAILY_SPEND = "platform_daily_spend"
    LOOP_DETECTED = "loop_detected"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_MISMATCH = "approval_mismatch"
    LEDGER_MISMATCH = "ledger_mismatch"
    MODEL_REFUSAL = "model_refusal"
    ENQUEUE_FAILED = "enqueue_failed"
    ENQUEUE_LOST = "enqueue_lost"
    RECOVERY_EXHAUSTED = "recovery_exhausted"
    ERROR = "error"
    CANCELLED = "cancelled"


class Run(models.Model):
    """One agent run over one ticket. Its id is the DBOS workflow id."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    merchant = models.ForeignKey("desk.Merchant", on_delete=models.PROTECT, related_name="runs")
    ticket = models.ForeignKey("desk.Ticket", on_delete=models.PROTECT, related_name="runs")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=80)
    application_version = models.CharField(max_length=80, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    stop_reason = models.CharField(max_length=32, choices=StopReason.choices, blank=True)
    stop_detail = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    prompt = models.TextField(help_text="The opening user turn, frozen at creation.")
    # Bounds, snapshotted at creation so a settings change never widens a run in flight.
    max_steps = models.PositiveIntegerField()
    max_tokens = models.BigIntegerField()
    max_spend_micros = models.BigIntegerField()
    deadline_seconds = models.PositiveIntegerField()
    max_refund_cents = models.BigIntegerField()
    loop_threshold = models.PositiveSmallIntegerField(default=3)
    # Stamped once at creation: a crash-looping run never earns a fresh clock.
    deadline_at = models.DateTimeField()
    # Time spent waiting for a person, handed back to the working deadline.
    waited_seconds = models.FloatField(default=0)
    # Totals; always equal to the sums over the step log.
    steps = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(default=0)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="forks"
    )
    fork_step = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["ticket"],
                condition=Q(status__in=["queued", "running", "awaiting_approval"]),
                name="one_open_run_per_ticket",
            ),
        ]
        indexes = [
            models.Index(fields=["merchant", "-created_at", "-id"], name="run_merchant_recent"),
            models.Index(fields=["merchant", "status", "-created_at"], name="run_merchant_status"),
            models.Index(fields=["ticket", "-created_at"], name="run_ticket_recent"),
            models.Index(fields=["status", "created_at"], name="run_status_created"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.ticket.reference})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def root(self) -> Run:
        """The origin of a fork chain: ledger keys hang off it, so forks never repeat effects."""
        run = self
        while run.forked_from_id is not None:
            run = Run.objects.get(pk=run.forked_from_id)
        return run


class StepKind(models.TextChoices):
    MODEL = "model"
    TOOL = "tool"
    APPROVAL = "approval"
    NOTE = "note", "staff note"
    BOUND = "bound"
    FINAL = "final"
    ERROR = "error"
    UNDO = "undo"


class Step(models.Model):
    """One line of the audit trail: a model call, a tool call, a gate event, a note.

    ``seq`` is dense per run and derived by the loop from checkpointed outputs,
    so a re-executed step lands on the same row: its accounting is *added*,
    never overwritten, so a retried model call's cost is not lost.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_log")
    seq = models.PositiveIntegerField()
    function_id = models.IntegerField(
        null=True, blank=True, help_text="The DBOS function id of the step."
    )
    kind = models.CharField(max_length=10, choices=StepKind.choices)
    tool = models.CharField(max_length=40, blank=True)
    tool_call_id = models.CharField(max_length=80, blank=True)
    risk = models.CharField(max_length=12, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    ok = models.BooleanField(default=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(default=0)
    latency_ms = models.IntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=1)
    replayed = models.BooleanField(default=False)
    inverse = models.JSONField(null=True, blank=True)
    undone_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="step_seq_per_run")]
        indexes = [models.Index(fields=["created_at"], name="step_created")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind} {self.tool}".strip()


class LedgerEntry(models.Model):
    """One claim per irreversible effect, keyed by root run + tool call id.

    Written in the same transaction as the refund, email or cancellation it
    records. A step that re-executes finds its key and returns ``result``
    instead of acting; the same key with a different ``args_hash`` refuses.
    """

    key = models.CharField(max_length=200, unique=True)
    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="ledger_entries"
    )
    root_run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="ledger_entries")
    tool = models.CharField(max_length=40)
    tool_call_id = models.CharField(max_length=80)
    args_hash = models.CharField(max_length=64)
    arguments = models.JSONField()
    approval = models.ForeignKey(
        "approvals.Approval",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="ledger_entries",
    )
    ok = models.BooleanField(default=True)
    result = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["merchant", "-created_at"], name="ledger_merchant_recent")]

    def __str__(self) -> str:
        return self.key
