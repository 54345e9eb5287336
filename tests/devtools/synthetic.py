"""Synthetic history for realistic volume: ``seed --synthetic N`` adds N finished runs.

Each run has a step log that adds up to its totals (model turns, reads, a
final step), and some go through the gate: an approval (approved, denied or
expired), and for approved refunds a ledger entry and the refund it paid.
Runs are spread over the merchants and over the past ``days`` days, ending
two days ago so today's caps (spend, refund ceiling) are left to the demo.

Rows are written with Postgres ``COPY`` and ids drawn from the tables' own
sequences up front, so 100,000 runs (about half a million steps) take
seconds, not minutes. The data is tagged: tickets, orders and customers carry
a ``SYN<batch>-`` reference, runs say ``synthetic`` in their prompt.

Over 400 lines because one generator must keep every row's foreign keys, totals and ledger
entries consistent with each other; split, the invariants would be spread over files that
must change together.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import secrets
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, models, transaction
from django.utils import timezone

from agent.models import Run, Step, payloads
from agent.models.ledger import LedgerEntry
from agent.record.steplog import call_hash
from agent.tools import get_tool
from agent.tools.registry import args_hash, identity_hash
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import (
    Customer,
    Membership,
    Merchant,
    Order,
    Refund,
    Role,
    Ticket,
    TicketMessage,
)
from deskhand.domain.desk.money import format_cents

RUNS_PER_TICKET = 10
CUSTOMERS_PER_MERCHANT = 50
MODEL_COST = (600, 4_000)  # micro-dollars per model turn
REFUND_SHARE = 0.06  # runs that ask to refund (keeps synthetic days under the refund ceiling)
EMAIL_SHARE = 0.04
READS = ("get_ticket", "get_order", "get_customer", "search_kb", "list_refunds")


class SyntheticError(Exception):
    pass


def _ids(model: type[models.Model], count: int) -> list[int]:
    """Reserve ``count`` ids from the table's own sequence, so COPY can set them."""
    if count == 0:
        return []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [model._meta.db_table, count],
        )
        return [r[0] for r in cur.fetchall()]


def _copy(model: type[models.Model], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """COPY rows into the model's table; refuses if a required column is missing."""
    required = {
        f.column
        for f in model._meta.concrete_fields
        if not f.null
        and not getattr(f, "generated", False)
        and not f.primary_key
        and f.db_default is models.NOT_PROVIDED
    }
    missing = required - set(columns)
    if missing:
        raise SyntheticError(
            f"synthetic rows for {model.__name__} lack columns {sorted(str(c) for c in missing)}"
        )
    cols = ", ".join(f'"{c}"' for c in columns)
    n = 0
    with (
        connection.cursor() as cur,
        cur.cursor.copy(f'COPY "{model._meta.db_table}" ({cols}) FROM STDIN') as copy,
    ):
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


@dataclasses.dataclass
class _Tenant:
    merchant: Merchant
    actors: list[int]
    customers: list[int] = dataclasses.field(default_factory=list)
    tickets: list[tuple[int, str, int]] = dataclasses.field(
        default_factory=list
    )  # id, reference, order id
    orders: dict[int, tuple[str, int]] = dataclasses.field(
        default_factory=dict
    )  # order id -> reference, total


def synthetic_generate(
    n: int,
    *,
    days: int = 90,
    seed: int | None = None,
    now: dt.datetime | None = None,
    steps: bool = True,
) -> dict[str, int]:
    """Add ``n`` finished runs (with steps, approvals, ledger rows, refunds) across all merchants.

    ``steps=False`` leaves out the step rows (each run still counts them, and everything
    else is the same run for run): a volume test of pages that never read steps then
    skips the million-odd rows that cost most of the time to encode.
    """
    if n < 0:
        raise SyntheticError("n must be zero or more")
    merchants = list(Merchant.objects.order_by("id"))
    if not merchants:
        raise SyntheticError("there are no merchants; run `python manage.py seed` first")
    rng = random.Random(seed)
    batch = secrets.token_hex(3).upper() if seed is None else f"{seed:06X}"[-6:]
    now = now or timezone.now()
    end = now - dt.timedelta(days=2)
    span = dt.timedelta(days=days).total_seconds()
    tenants = []
    for m in merchants:
        actors = list(
            Membership.objects.filter(merchant=m, role__in=[Role.OWNER, Role.AGENT]).values_list(
                "user_id", flat=True
            )
        )
        tenants.append(_Tenant(m, actors or [None]))  # type: ignore[list-item]
    counts: dict[str, int] = {}
    with transaction.atomic():
        _people_and_tickets(tenants, n, rng, batch, end, span, counts)
        _runs(tenants, n, rng, end, span, counts, steps)
        with connection.cursor() as cur:
            for model in (Run, Step, Approval, LedgerEntry, Refund, Ticket):
                cur.execute(f'ANALYZE "{model._meta.db_table}"')
    return counts


def _people_and_tickets(
    tenants: list[_Tenant],
    n: int,
    rng: random.Random,
    batch: str,
    end: dt.datetime,
    span: float,
    counts: dict[str, int],
) -> None:
    per_tenant = [len(range(i, n, len(tenants))) for i in range(len(tenants))]
    ticket_counts = [max(1, -(-k // RUNS_PER_TICKET)) if k else 0 for k in per_tenant]
    customer_ids = _ids(Customer, CUSTOMERS_PER_MERCHANT * sum(1 for k in per_tenant if k))
    ticket_ids = _ids(Ticket, sum(ticket_counts))
    order_ids = _ids(Order, sum(ticket_counts))
    customers, orders, tickets, messages = [], [], [], []
    ci = ti = 0
    for t, k in zip(tenants, ticket_counts, strict=True):
        if not k:
            continue
        slug = t.merchant.slug
        for j in range(CUSTOMERS_PER_MERCHANT):
            cid = customer_ids[ci]
            ci += 1
            t.customers.append(cid)
            customers.append(
                (
                    cid,
                    t.merchant.pk,
                    f"Synthetic Customer {batch}-{j}",
                    f"syn-{batch.lower()}-{j}@{slug}.example",
                )
            )
        for j in range(k):
            tid, oid = ticket_ids[ti], order_ids[ti]
            ti += 1
            ref = f"SYN{batch}-{j + 1}"
            cust = rng.choice(t.customers)
            placed = end - dt.timedelta(seconds=rng.random() * span + 86_400 * 10)
            total = rng.randrange(1_500, 30_000)
            t.orders[oid] = (ref, total)
            t.tickets.append((tid, ref, oid))
            orders.append(
                (
                    oid,
                    t.merchant.pk,
                    cust,
                    ref,
                    "delivered",
                    total,
                    "USD",
                    placed,
                    placed + dt.timedelta(days=4),
                    "",
                )
            )
            tickets.append(
                (
                    tid,
                    t.merchant.pk,
                    cust,
                    ref,
                    f"Synthetic ticket {ref}",
                    "resolved",
                    rng.choice(["low", "normal", "normal", "high"]),
                    ["synthetic"],
                    placed,
                    placed,
                )
            )
            messages.append(
                (
                    tid,
                    "customer",
                    "email",
                    "in",
                    f"(synthetic) A question about order {ref}.",
                    placed,
                )
            )
    counts["customers"] = _copy(Customer, ["id", "merchant_id", "name", "email"], customers)
    counts["orders"] = _copy(
        Order,
        [
            "id",
            "merchant_id",
            "customer_id",
            "reference",
            "status",
            "total_cents",
            "currency",
            "placed_at",
            "delivered_at",
            "cancel_reason",
        ],
        orders,
    )
    counts["tickets"] = _copy(
        Ticket,
        [
            "id",
            "merchant_id",
            "customer_id",
            "reference",
            "subject",
            "status",
            "priority",
            "tags",
            "created_at",
            "updated_at",
        ],
        tickets,
    )
    _copy(
        TicketMessage, ["ticket_id", "kind", "channel", "direction", "body", "created_at"], messages
    )


_RUN_COLUMNS = [
    "id",
    "merchant_id",
    "ticket_id",
    "started_by_id",
    "provider",
    "model",
    "application_version",
    "status",
    "stop_reason",
    "stop_detail",
    "summary",
    "prompt",
    "max_steps",
    "max_tokens",
    "max_spend_micros",
    "deadline_seconds",
    "max_refund_cents",
    "loop_threshold",
    "deadline_at",
    "waited_seconds",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
]
_STEP_COLUMNS = [
    "run_id",
    "seq",
    "kind",
    "tool",
    "tool_call_id",
    "risk",
    "arguments",
    "args_hash",
    "result",
    "ok",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "latency_ms",
    "attempts",
    "replayed",
    "created_at",
]
_APPROVAL_COLUMNS = [
    "id",
    "merchant_id",
    "run_id",
    "tool_call_id",
    "tool",
    "arguments",
    "args_hash",
    "preview",
    "prior_effects",
    "facts",
    "requested_at",
    "expires_at",
    "status",
    "decided_by_id",
    "decided_at",
    "reason",
    "channel",
    "delivered_at",
]
_LEDGER_COLUMNS = [
    "id",
    "key",
    "merchant_id",
    "root_run_id",
    "run_id",
    "tool",
    "tool_call_id",
    "args_hash",
    "identity",
    "arguments",
    "approval_id",
    "ok",
    "result",
    "created_at",
]
_REFUND_COLUMNS = [
    "merchant_id",
    "order_id",
    "amount_cents",
    "currency",
    "reason",
    "run_id",
    "ledger_entry_id",
    "created_at",
]
_AUDIT_COLUMNS = ["merchant_id", "actor_id", "action", "run_id", "channel", "detail", "created_at"]


# COPY takes JSON as text; encoding it here is cheaper than psycopg's Jsonb dumper.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class _RunBuilder:
    """One run's steps, appended in order with a clock that moves forward."""

    def __init__(
        self, run_id: uuid.UUID, start: dt.datetime, rng: random.Random, keep: bool = True
    ) -> None:
        self.run_id, self.clock, self.rnd, self.keep = run_id, start, rng.random, keep
        self.rows: list[tuple[Any, ...]] = []
        self.count = 0  # steps taken, kept or not
        self.tokens_in = self.tokens_out = self.cost = 0

    def _between(self, low: int, high: int) -> int:
        return low + int(self.rnd() * (high - low))

    def add(
        self,
        kind: str,
        *,
        tool: str = "",
        call: str = "",
        risk: str = "",
        args: Any = None,
        result: Any = None,
        ok: bool = True,
        model: bool = False,
        latency: int | None = None,
    ) -> dt.datetime:
        between = self._between
        tin = between(900, 3_000) if model else 0
        tout = between(60, 400) if model else 0
        cost = between(*MODEL_COST) if model else 0
        ms = latency if latency is not None else (between(300, 2_500) if model else between(3, 80))
        self.clock += dt.timedelta(milliseconds=ms + between(1, 30))
        self.count += 1
        self.tokens_in += tin
        self.tokens_out += tout
        self.cost += cost
        if not self.keep:
            return self.clock
        self.rows.append(
            (
                self.run_id,
                self.count,
                kind,
                tool,
                call,
                risk,
                _dumps(args) if args else "{}",
                call_hash(kind, tool, args or {}),
                # The same typed, versioned payload log_step writes.
                _dumps(payloads.KINDS[kind](**(result or {})).to_json()),
                ok,
                tin,
                tout,
                cost,
                ms,
                1,
                False,
                self.clock,
            )
        )
        return self.clock

    def model_turn(self, text: str = "", tool: str = "", call: str = "", args: Any = None) -> None:
        content: list[dict[str, Any]] = []
        if text:
            content.append({"type": "text", "text": text})
        if tool:
            content.append({"type": "tool_use", "id": call, "name": tool, "input": args or {}})
        self.add(
            "model",
            args={"message_count": self.count + 1},
            result={
                "content": content,
                "stop_reason": "tool_use" if tool else "end_turn",
                "provider": "scripted",
                "model": "synthetic",
            },
            model=True,
        )


def _runs(
    tenants: list[_Tenant],
    n: int,
    rng: random.Random,
    end: dt.datetime,
    span: float,
    counts: dict[str, int],
    steps: bool = True,
) -> None:
    run_rows: list[tuple[Any, ...]] = []
    step_rows: list[tuple[Any, ...]] = []
    approval_rows: list[tuple[Any, ...]] = []
    ledger_rows: list[tuple[Any, ...]] = []
    refund_rows: list[tuple[Any, ...]] = []
    audit_rows: list[tuple[Any, ...]] = []
    pending_ledger: list[tuple[Any, ...]] = []  # ledger rows awaiting an id, with their refund
    for i in range(n):
        t = tenants[i % len(tenants)]
        tid, ref, oid = t.tickets[(i // len(tenants)) // RUNS_PER_TICKET]
        run_id = uuid.uuid4()
        created = end - dt.timedelta(seconds=rng.random() * span)
        actor = rng.choice(t.actors)
        b = _RunBuilder(
            run_id, created + dt.timedelta(milliseconds=50 + int(rng.random() * 850)), rng, steps
        )
        started = b.clock
        waited = 0.0
        b.model_turn(tool="get_ticket", call=f"toolu_{i}_1", args={"reference": ref})
        b.add(
            "tool",
            tool="get_ticket",
            call=f"toolu_{i}_1",
            risk="read",
            args={"reference": ref},
            result={"text": f'{{"reference": "{ref}", "subject": "Synthetic ticket {ref}"}}'},
        )
        for j in range(int(rng.random() * 3)):
            read = rng.choice(READS[1:])
            b.model_turn(tool=read, call=f"toolu_{i}_r{j}", args={"order_reference": ref})
            b.add(
                "tool",
                tool=read,
                call=f"toolu_{i}_r{j}",
                risk="read",
                args={"order_reference": ref},
                result={"text": '{"ok": true}'},
            )
        roll = rng.random()
        status, stop_reason = "succeeded", "end_turn"
        effects = "No money moved, no email was sent and no order was cancelled."
        if roll < REFUND_SHARE + EMAIL_SHARE:
            if roll < REFUND_SHARE:
                tool = "issue_refund"
                args: dict[str, Any] = {
                    "order_reference": ref,
                    "amount_cents": rng.randrange(300, min(2_500, t.orders[oid][1])),
                    "reason": "synthetic: damaged in transit",
                }
                preview = f"Refund {format_cents(args['amount_cents'])} against order {ref} — {args['reason']}"
            else:
                tool = "send_customer_email"
                args = {
                    "reference": ref,
                    "subject": "About your order",
                    "body": "Synthetic reply to the customer.",
                }
                preview = (
                    f"Email the customer on {ref} — subject: 'About your order'\n\n{args['body']}"
                )
            call = f"toolu_{i}_gate"
            digest = args_hash(tool, args)
            b.model_turn(tool=tool, call=call, args=args)
            requested = b.add(
                "approval",
                tool=tool,
                call=call,
                risk="irreversible",
                args=args,
                result={"event": "requested", "preview": preview, "args_hash": digest},
            )
            decision = rng.choices(["approved", "denied", "expired"], weights=[75, 18, 7])[0]
            wait = rng.uniform(20, 3_600) if decision != "expired" else 86_400.0
            waited += wait
            b.clock += dt.timedelta(seconds=wait)
            decided = b.add(
                "approval",
                tool=tool,
                call=call,
                args=args,
                ok=decision != "expired",
                result={
                    "event": decision,
                    "waited_seconds": round(wait, 3),
                    "reason": "synthetic" if decision == "denied" else "",
                },
            )
            approval_id = uuid.uuid4()
            approval_rows.append(
                (
                    approval_id,
                    t.merchant.pk,
                    run_id,
                    call,
                    tool,
                    _dumps(args),
                    digest,
                    preview,
                    "[]",  # prior_effects: not computed for synthetic rows
                    "{}",  # facts: nor the order's money as shown (it holds as before)
                    requested,
                    requested + dt.timedelta(seconds=t.merchant.approval_ttl_seconds),
                    decision,
                    actor if decision != "expired" else None,
                    decided if decision != "expired" else None,
                    "synthetic" if decision == "denied" else "",
                    "web" if decision != "expired" else "",
                    decided,
                )
            )
            if decision != "expired":
                audit_rows.append(
                    (
                        t.merchant.pk,
                        actor,
                        f"approval.{'approve' if decision == 'approved' else 'deny'}",
                        run_id,
                        "web",
                        _dumps({"approval": str(approval_id), "tool": tool, "args_hash": digest}),
                        decided,
                    )
                )
            if decision == "approved":
                key = f"{run_id}:{call}:{digest[:16]}"  # agent.record.execute.ledger_key
                text = f"Done: {preview.splitlines()[0]}"
                at = b.add(
                    "tool",
                    tool=tool,
                    call=call,
                    risk="irreversible",
                    args=args,
                    result={"text": text, "ledger_key": key},
                )
                pending_ledger.append(
                    (
                        (
                            key,
                            t.merchant.pk,
                            run_id,
                            run_id,
                            tool,
                            call,
                            digest,
                            identity_hash(get_tool(tool), args),
                            _dumps(args),
                            approval_id,
                            True,
                            text,
                            at,
                        ),
                        (
                            t.merchant.pk,
                            oid,
                            args["amount_cents"],
                            "USD",
                            args["reason"],
                            run_id,
                            at,
                        )
                        if tool == "issue_refund"
                        else None,
                    )
                )
                effects = text
            elif decision == "expired":
                status, stop_reason = "failed", "approval_expired"
            if status == "succeeded":
                b.model_turn(text="Done; summarised for the customer.")
        elif roll < REFUND_SHARE + EMAIL_SHARE + 0.05:
            status, stop_reason = (
                "exhausted",
                rng.choice(["step_cap", "spend_cap", "deadline", "loop_detected"]),
            )
        elif roll < REFUND_SHARE + EMAIL_SHARE + 0.08:
            status, stop_reason = "cancelled", "cancelled"
        elif roll < REFUND_SHARE + EMAIL_SHARE + 0.10:
            status, stop_reason = "failed", "error"
        else:
            b.model_turn(text="Answered the customer's question from the order record.")
        summary = (
            "" if status == "succeeded" else f"Stopped: {stop_reason}.\n\n"
        ) + f"Effects:\n{effects}"
        final_kind = {
            "succeeded": "final",
            "failed": "error" if stop_reason == "error" else "bound",
        }.get(status, "bound")
        finished = b.add(
            final_kind,
            result={"status": status, "stop_reason": stop_reason, "summary": summary},
            ok=status == "succeeded",
            latency=0,
        )
        step_rows.extend(b.rows)
        run_rows.append(
            (
                run_id,
                t.merchant.pk,
                tid,
                actor,
                "scripted",
                "synthetic",
                "synthetic-1",
                status,
                stop_reason,
                "",
                summary,
                f"Ticket reference: {ref}\n\n(synthetic run)",
                24,
                400_000,
                2_000_000,
                900,
                25_000,
                3,
                created + dt.timedelta(seconds=900),
                waited,
                b.count,
                b.tokens_in,
                b.tokens_out,
                b.cost,
                created,
                started,
                finished,
                finished,
            )
        )
        audit_rows.append(
            (
                t.merchant.pk,
                actor,
                "run.start",
                run_id,
                "web",
                _dumps({"ticket": ref, "synthetic": True}),
                created,
            )
        )
    counts["runs"] = _copy(Run, _RUN_COLUMNS, run_rows)
    counts["steps"] = _copy(Step, _STEP_COLUMNS, step_rows)
    counts["approvals"] = _copy(Approval, _APPROVAL_COLUMNS, approval_rows)
    ledger_ids = _ids(LedgerEntry, len(pending_ledger))
    for lid, (entry, refund) in zip(ledger_ids, pending_ledger, strict=True):
        ledger_rows.append((lid, *entry))
        if refund is not None:
            refund_rows.append((*refund[:6], lid, refund[6]))
    counts["ledger_entries"] = _copy(LedgerEntry, _LEDGER_COLUMNS, ledger_rows)
    counts["refunds"] = _copy(Refund, _REFUND_COLUMNS, refund_rows)
    # Who acted is kept with each event (actor_ref, actor_name), as AuditEvent.save does.
    names = dict(
        get_user_model()
        .objects.filter(pk__in={r[1] for r in audit_rows if r[1] is not None})
        .values_list("pk", "email")
    )
    counts["audit_events"] = _copy(
        AuditEvent,
        [*_AUDIT_COLUMNS, "actor_ref", "actor_name"],
        ((*r, r[1], names.get(r[1], "")) for r in audit_rows),
    )
