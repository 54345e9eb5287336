"""A back catalogue of the store's orders, from a CSV file: all of it, or nothing.

One row per order line; the rows of one order (its ``reference``) repeat the order's own
columns, which must agree. An order with no lines is one row with the line columns empty.
Money is whole minor units of the row's currency (``1999``, never ``19.99``); times are ISO
8601 with a time zone. Every order goes through ``pushed.pushed_order_upsert`` — the same
rule as ``PUT /api/v1/orders/{reference}``, versions included — inside one transaction, so
the first bad row (its line number and what is wrong) leaves nothing stored.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from deskhand.domain.desk.pushed import (
    PushedLine,
    PushedOrder,
    PushRefused,
    pushed_order_problem,
    pushed_order_upsert,
)

ORDER_COLUMNS = (
    "reference",
    "version",
    "customer_email",
    "customer_name",
    "status",
    "currency",
    "total_cents",
    "placed_at",
    "delivered_at",
    "payment_reference",
)
LINE_COLUMNS = ("sku", "description", "quantity", "unit_price_cents")
COLUMNS = ORDER_COLUMNS + LINE_COLUMNS
REQUIRED = (
    "reference",
    "version",
    "customer_email",
    "status",
    "currency",
    "total_cents",
    "placed_at",
)


class ImportRefused(Exception):
    """The file was refused, nothing stored; the message names the line and the problem."""


@dataclasses.dataclass
class _Draft:
    line: int
    order: dict[str, str]
    items: list[PushedLine]


@dataclasses.dataclass(frozen=True)
class Imported:
    created: int
    updated: int
    unchanged: int


def _whole(value: str, column: str, line: int) -> int:
    text = value.strip()
    if not text.lstrip("-").isdigit():
        raise ImportRefused(
            f"line {line}: {column} must be a whole number (minor units, like 1999), "
            f"not {text[:40]!r}."
        )
    return int(text)


def _when(value: str, column: str, line: int) -> dt.datetime:
    try:
        found = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        found = None
    if found is None or found.tzinfo is None:
        raise ImportRefused(
            f"line {line}: {column} must be an ISO 8601 time with a time zone "
            f"(like 2026-11-20T10:00:00Z), not {value.strip()[:40]!r}."
        )
    return found


def _drafts(rows: Iterable[dict[str, Any]], reader: Any) -> list[_Draft]:
    drafts: dict[str, _Draft] = {}
    for row in rows:
        line = reader.line_num
        if None in row or any(v is None for v in row.values()):
            raise ImportRefused(f"line {line}: it has not {len(COLUMNS)} columns as the header.")
        for column in REQUIRED:
            if not row[column].strip():
                raise ImportRefused(f"line {line}: {column} is empty.")
        reference = row["reference"].strip()
        own = {c: row[c].strip() for c in ORDER_COLUMNS}
        draft = drafts.get(reference.upper())
        if draft is None:
            draft = drafts[reference.upper()] = _Draft(line=line, order=own, items=[])
        elif draft.order != own:
            differ = next(c for c in ORDER_COLUMNS if draft.order[c] != own[c])
            raise ImportRefused(
                f"line {line}: order {reference}'s {differ} differs from line {draft.line}'s; "
                "every line of one order repeats the order's own columns."
            )
        if any(row[c].strip() for c in LINE_COLUMNS):
            draft.items.append(
                PushedLine(
                    sku=row["sku"].strip(),
                    description=row["description"].strip(),
                    quantity=_whole(row["quantity"], "quantity", line),
                    unit_price_cents=_whole(row["unit_price_cents"], "unit_price_cents", line),
                )
            )
    return list(drafts.values())


def _pushed(draft: _Draft) -> PushedOrder:
    o, line = draft.order, draft.line
    delivered = o["delivered_at"]
    order = PushedOrder(
        reference=o["reference"],
        version=_whole(o["version"], "version", line),
        customer_email=o["customer_email"],
        customer_name=o["customer_name"],
        status=o["status"],
        currency=o["currency"],
        total_cents=_whole(o["total_cents"], "total_cents", line),
        placed_at=_when(o["placed_at"], "placed_at", line),
        delivered_at=_when(delivered, "delivered_at", line) if delivered else None,
        payment_reference=o["payment_reference"],
        items=tuple(draft.items),
    )
    problem = pushed_order_problem(order)
    if problem:
        raise ImportRefused(f"line {line}: {problem}")
    return order


def orders_import(*, merchant_id: int, lines: Iterable[str], now: dt.datetime) -> Imported:
    """Read the CSV ``lines`` and store every order in one transaction, or refuse the file."""
    reader = csv.DictReader(lines)
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [h for h in header if h not in COLUMNS]
    if missing or unknown:
        wrong = (f"lacks {', '.join(missing)}" if missing else "") + (
            ("; " if missing else "") + f"has unknown {', '.join(unknown)}" if unknown else ""
        )
        raise ImportRefused(f"line 1: the header {wrong} (columns: {', '.join(COLUMNS)}).")
    reader.fieldnames = header
    try:
        drafts = _drafts(reader, reader)
    except csv.Error as exc:
        raise ImportRefused(f"line {reader.line_num}: {exc}.") from None
    orders = [(d.line, _pushed(d)) for d in drafts]
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    with transaction.atomic():
        for line, order in orders:
            try:
                done = pushed_order_upsert(merchant_id=merchant_id, order=order, now=now)
            except PushRefused as exc:
                raise ImportRefused(f"line {line}: {exc}") from None
            counts[done.outcome] += 1
    return Imported(**counts)
