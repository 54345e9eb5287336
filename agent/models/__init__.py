"""Every model of the agent app: runs and their step log here, what a step row holds
(``payloads``), the ledger (``ledger``), reconciliation findings (``effects``) and
redactions (``privacy``), imported at the bottom so Django registers them.

The step log is the audit trail *and* the live feed: the console reads the same rows an
auditor does. One package for the app's rows, below every other part of ``agent``, so the
code that owns a model (the ledger, privacy, effects) imports it and it imports none of
them back: the models import nothing of ``agent`` outside this package.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

from agent.models import payloads
from agent.models.payloads import StepKind

if TYPE_CHECKING:
    from agent.models.payloads import StepPayload


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    # It asked the customer and waits for the answer (agent.customer), holding no thread.
    AWAITING_CUSTOMER = "awaiting_customer"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"
    # A person cancelled it, but DBOS has not yet confirmed its workflow can no longer act:
    # still open (it holds its ticket), no longer active (nothing may act for it).
    CANCELLING = "cancelling"


# The workflow works and people may act on the run (decide, steer, cancel).
ACTIVE_STATUSES = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.AWAITING_APPROVAL,
    RunStatus.AWAITING_CUSTOMER,
)
# Not yet terminal: one per ticket (the partial unique index below).
OPEN_STATUSES = (*ACTIVE_STATUSES, RunStatus.CANCELLING)
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
    # It asked the customer, and the merchant's reply window passed without an answer.
    CUSTOMER_NO_REPLY = "customer_no_reply", "customer did not reply"
    APPROVAL_MISMATCH = "approval_mismatch"
    LEDGER_MISMATCH = "ledger_mismatch"
    MODEL_REFUSAL = "model_refusal"
    # The reply was cut off by max_tokens twice (once is answered with "finish briefly").
    TRUNCATED = "truncated"
    CONTEXT_WINDOW_EXCEEDED = "context_window_exceeded"
    # The API gave a stop reason Deskhand does not know (or none): the reply is not acted on.
    UNKNOWN_STOP_REASON = "unknown_stop_reason"
    # The model call produced no reply: a permanent API error, or its retries spent.
    PROVIDER_ERROR = "provider_error"
    ENQUEUE_FAILED = "enqueue_failed"
    ENQUEUE_LOST = "enqueue_lost"
    RECOVERY_EXHAUSTED = "recovery_exhausted"
    ERROR = "error"
    CANCELLED = "cancelled"


class PromptVersion(models.Model):
    """A system prompt template and tool set some model call was sent, stored once.

    Content-addressed: ``sha256`` is taken over the canonical JSON of the template and
    the tool definitions, and the template holds ``{token}`` where a run's fence token
    went, so every run sent the same prompt names the same version (``agent.conversation.prompt_versions``).
    Rows are never changed or deleted; ``replay --at`` prints a run's from here.
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    system_template = models.TextField()
    tools = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"prompt version {self.sha256[:12]}"


class Run(models.Model):
    """One agent run over one ticket. Its id is the DBOS workflow id."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of their own: run_merchant_recent and run_ticket_recent lead with them (every
    # index on this table is written again by each status change of a run).
    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    ticket = models.ForeignKey(
        "desk.Ticket", on_delete=models.PROTECT, related_name="runs", db_index=False
    )
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
    # The merchant's order source when the run started (``deskhand.domain.desk.orders``):
    # every read of an order in this run asks it, whatever the merchant chooses meanwhile.
    order_source = models.CharField(max_length=8, default="local", db_default="local")
    # Stamped once at creation: a crash-looping run never earns a fresh clock.
    deadline_at = models.DateTimeField()
    # Time spent waiting for a person, handed back to the working deadline.
    waited_seconds = models.FloatField(default=0)
    # A model call the API asked to wait for (429/529 retry-after): until when, and why, for
    # the run page. Set by the model step that was told to wait; cleared by the next call.
    waiting_until = models.DateTimeField(null=True, blank=True)
    wait_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Totals; always equal to the sums over the step log.
    steps = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # Prompt-cache input, counted apart from input_tokens (as the API reports it) and in the
    # token cap: a cached prefix is still tokens the run sent.
    cache_read_tokens = models.BigIntegerField(default=0, db_default=0)
    cache_write_tokens = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0)
    forked_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="forks",
        db_index=False,  # run_forked_from: only forks are indexed
    )
    fork_step = models.PositiveIntegerField(null=True, blank=True)
    # The prompt version its latest model call was sent (each model step's payload names its
    # own); null on rows older than versions (agent.replay.compat), or with no model call yet.
    prompt_version = models.ForeignKey(
        PromptVersion,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # run_prompt_version, without the LIKE index a text key would get
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["ticket"],
                condition=Q(
                    status__in=[
                        "queued",
                        "running",
                        "awaiting_approval",
                        "awaiting_customer",
                        "cancelling",
                    ]
                ),
                name="one_open_run_per_ticket",
            ),
        ]
        indexes = [
            models.Index(fields=["merchant", "-created_at", "-id"], name="run_merchant_recent"),
            models.Index(fields=["merchant", "status", "-created_at"], name="run_merchant_status"),
            models.Index(fields=["ticket", "-created_at"], name="run_ticket_recent"),
            models.Index(fields=["status", "created_at"], name="run_status_created"),
            models.Index(
                fields=["forked_from"],
                name="run_forked_from",
                condition=Q(forked_from__isnull=False),
            ),
            models.Index(fields=["prompt_version"], name="run_prompt_version"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.ticket.reference})"

    @property
    def is_open(self) -> bool:
        """Not yet terminal (a cancelling run is still open: its workflow may not have stopped)."""
        return self.status in OPEN_STATUSES

    @property
    def is_active(self) -> bool:
        """Open and not being cancelled: its workflow may act, and people may act on it."""
        return self.status in ACTIVE_STATUSES

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of the input the prompt cache served (None before any input)."""
        sent = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / sent if sent else None

    def root(self) -> Run:
        """The origin of a fork chain: ledger keys hang off it, so forks never repeat effects."""
        run = self
        while run.forked_from_id is not None:
            run = Run.objects.get(pk=run.forked_from_id)
        return run


class Step(models.Model):
    """One line of the audit trail: a model call, a tool call, a gate event, a note.

    ``seq`` is dense per run and derived by the loop from checkpointed outputs,
    so a re-executed step lands on the same row: its accounting is *added*,
    never overwritten, so a retried model call's cost is not lost. A row is
    only ever re-written by the same call (``args_hash``); see ``agent.record.steplog``.
    ``result`` holds a typed payload (``agent.models.payloads``); read it as ``payload``.
    """

    # step_seq_per_run (run, seq) leads with the run: a second index would only cost writes.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_log", db_index=False)
    seq = models.PositiveIntegerField()
    function_id = models.IntegerField(
        null=True, blank=True, help_text="The DBOS function id of the step."
    )
    kind = models.CharField(max_length=10, choices=StepKind.choices)
    tool = models.CharField(max_length=40, blank=True)
    tool_call_id = models.CharField(max_length=80, blank=True)
    risk = models.CharField(max_length=12, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    args_hash = models.CharField(
        max_length=64,
        blank=True,
        help_text="Which call wrote this row (agent.record.steplog.call_hash); empty on rows written "
        "before it was recorded.",
    )
    result = models.JSONField(default=dict, blank=True)
    ok = models.BooleanField(default=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0, db_default=0)
    cache_write_tokens = models.BigIntegerField(default=0, db_default=0)
    cost_micros = models.BigIntegerField(default=0)
    latency_ms = models.IntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=1)
    replayed = models.BooleanField(default=False)
    inverse = models.JSONField(null=True, blank=True)
    undone_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # step_undone_by: only the few undone steps are indexed
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="step_seq_per_run")]
        indexes = [
            models.Index(fields=["created_at"], name="step_created"),
            models.Index(
                fields=["undone_by"], name="step_undone_by", condition=Q(undone_by__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind} {self.tool}".strip()

    @property
    def payload(self) -> StepPayload:
        """``result`` as its typed payload (``agent.models.payloads.read``)."""
        return payloads.read(self)


class WorkflowFindingKind(models.TextChoices):
    FORK_ADOPTED = "fork_adopted", "a DBOS fork that became a run"
    FORK_REFUSED = "fork_refused", "a DBOS fork Deskhand refused"
    FORK_FAILED = "fork_failed", "a DBOS fork that ended before Deskhand saw it"
    UNKNOWN_WORKFLOW = "unknown_workflow", "a run workflow that is no run's"
    WORKFLOW_REVIVED = "workflow_revived", "DBOS re-activated the workflow of a closed run"
    WORKFLOW_ENDED = "workflow_ended", "DBOS ended the workflow of an open run"


class WorkflowFinding(models.Model):
    """Something done to a run's workflow with DBOS's own tools, or a disagreement between DBOS
    and the runs, and what Deskhand did about it.

    An operator may fork, resume or cancel a workflow with ``dbos workflow …`` or a DBOS
    client; the reconciler (``agent.ops.reconciler``) and a workflow that finds itself with
    no run (``agent.replay.fork.workflow_adopt``) make the runs tell the truth about it and
    write one row here per workflow and kind, with the sentence people read (the console's
    attention queue, ``health --json``, ``manage.py workflow_findings``). A row that needs
    nobody (a fork that became a run) is written settled; the others stay open until a
    person settles them (``resolved_*``).
    """

    workflow_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=WorkflowFindingKind.choices)
    # Null when the workflow names no run of any merchant (shown in health only).
    merchant = models.ForeignKey(
        "desk.Merchant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="workflow_findings",
    )
    # The run the workflow is (an adopted fork, a revived or ended run's workflow), if any.
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="workflow_findings"
    )
    # For a fork: the run whose workflow DBOS forked.
    forked_from = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    dbos_status = models.CharField(max_length=40, blank=True)
    detail = models.TextField()
    found_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=254, blank=True)
    resolution = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_id", "kind"], name="one_workflow_finding_per_kind"
            )
        ]
        indexes = [
            models.Index(fields=["merchant", "-found_at"], name="wf_finding_merchant_recent"),
            models.Index(
                fields=["found_at"], condition=Q(resolved_at__isnull=True), name="wf_finding_open"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.workflow_id}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


# Models owned by other parts of the app, imported so Django registers them with it.
from agent.models.effects import (  # noqa: E402
    EffectFinding,
    FindingKind,
    PaymentEvent,
    PaymentEventStatus,
)
from agent.models.ledger import LedgerEntry, LedgerState  # noqa: E402
from agent.models.privacy import Redaction, RedactionReason  # noqa: E402

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "EffectFinding",
    "FindingKind",
    "LedgerEntry",
    "LedgerState",
    "PaymentEvent",
    "PaymentEventStatus",
    "PromptVersion",
    "Redaction",
    "RedactionReason",
    "Run",
    "RunStatus",
    "Step",
    "StepKind",
    "StopReason",
    "WorkflowFinding",
    "WorkflowFindingKind",
]
