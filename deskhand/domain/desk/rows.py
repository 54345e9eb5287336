"""Reads through a statement built once: the two the agent's CPU per step is measured to need.

Through a queryset, each read compiles its SQL again and walks ``select_related``'s (and
``prefetch_related``'s) machinery. Here the SELECT is built once per shape from the models'
metadata, and the instances are made as the ORM would — every field's own conversion from
the database, related rows cached as ``select_related`` caches them, and (``cache_related``)
a reverse relation's rows handed over as ``prefetch_related`` hands them.

What each buys, as ``bench --loop``'s ``agent_cpu_per_step_ms`` (Deskhand's own CPU per
step of an NW-1 run; 2026-12-07, 2 shared cores at load 4-10, paired runs alternating with
the ORM form; docs/benchmarks.md, "What the workarounds buy"):

* ``row_by_pk`` — the run read (and locked) by every model turn, tool step and gate step,
  the approval at the gate, the refund's and the ticket writes' locks. Through the ORM (and
  the reads below too): +13 % to +139 %, median +50 % over the reads below alone (3 pairs).
* ``rows_where`` + ``cache_related`` — only for the tool reads of ``deskhand.domain.desk.selectors``
  (``ticket_get`` with its thread, ``order_get`` with its lines), where every hand-written
  WHERE lives, each pinned against its ORM form in ``tests/integrity/test_rows.py``.
  Through the ORM, with ``kb_search``: +0 % to +39 %, median +31 % (5 pairs).

* ``rows_where`` — the run's summary (``agent.run.selectors.run_ledger_entries`` and
  ``run_approvals_not_performed``), its figure in their docstrings.

Back to the ORM, each under 10 %: ``kb_search`` alone +8 % to +53 %, median +9 % (3 pairs;
``bench --loop --sites``: 0.9 ms of SQL CPU a 15-step run), and the reads asked once a run
(the lineage, the policy, the webhook, a closing run's approvals, the own-claim lock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, models


@dataclasses.dataclass(frozen=True)
class _Part:
    """How to make one model's instance from its run of columns in the row: all of it worked
    out when the statement is built, nothing per read."""

    cls: type[models.Model]
    attnames: list[str]
    pk_index: int
    converters: list[tuple[Any, list[Callable[..., Any]]]]  # each column's, the ORM's own
    fk: Any  # the read model's foreign key it hangs off; None for the read model itself


# (model, related, lock, alias, where, tail) -> (SQL, one part per model read)
_BUILT: dict[tuple[Any, ...], tuple[str, list[_Part]]] = {}


def _part(model: type[models.Model], alias: str, table: str, fk: Any) -> tuple[list[str], _Part]:
    conn = connections[alias]
    fields = list(model._meta.concrete_fields)
    cols = [f"{table}.{conn.ops.quote_name(str(f.column))}" for f in fields]
    converters = []
    for f in fields:
        col = f.get_col(table)
        converters.append((col, [*conn.ops.get_db_converters(col), *f.get_db_converters(conn)]))
    attnames = [f.attname for f in fields]
    return cols, _Part(model, attnames, fields.index(model._meta.pk), converters, fk)


def _build(
    model: type[models.Model],
    related: Sequence[str],
    lock: bool,
    alias: str,
    where: str,
    tail: str = "",
) -> tuple[str, list[_Part]]:
    conn = connections[alias]
    q = conn.ops.quote_name
    cols, first = _part(model, alias, "t0", None)
    parts = [first]
    joins = []
    for i, name in enumerate(related, start=1):
        fk = model._meta.get_field(name)
        if not isinstance(fk, models.ForeignKey):
            raise TypeError(f"{model.__name__}.{name} is not a foreign key of its own")
        target = fk.related_model
        assert isinstance(target, type)
        rcols, part = _part(target, alias, f"t{i}", fk)
        cols += rcols
        parts.append(part)
        joins.append(
            f"{'LEFT JOIN' if fk.null else 'JOIN'} {q(target._meta.db_table)} t{i}"
            f" ON t{i}.{q(str(fk.target_field.column))} = t0.{q(str(fk.column))}"
        )
    sql = (
        f"SELECT {', '.join(cols)} FROM {q(model._meta.db_table)} t0 {' '.join(joins)}"
        f" WHERE {where}{tail}" + (" FOR UPDATE OF t0" if lock else "")
    )
    return sql, parts


def _instances(row: Sequence[Any], parts: list[_Part], using: str) -> models.Model:
    """The read model's instance from one row, its related rows cached on it."""
    conn = connections[using]
    start, out = 0, None
    for part in parts:
        values = list(row[start : start + len(part.attnames)])
        start += len(part.attnames)
        obj = None
        if part.fk is None or values[part.pk_index] is not None:  # else a key holding no row
            for i, (col, convs) in enumerate(part.converters):
                for convert in convs:
                    values[i] = convert(values[i], col, conn)
            obj = part.cls.from_db(using, part.attnames, values)
        if out is None:
            out = obj
        else:
            part.fk.set_cached_value(out, obj)
    assert out is not None
    return out


def row_by_pk[M: models.Model](
    model: type[M],
    pk: Any,
    *,
    related: Sequence[str] = (),
    lock: bool = False,
    using: str = "default",
) -> M:
    """``model.objects.select_related(*related).get(pk=pk)`` (with ``select_for_update(of=
    ("self",))`` when ``lock``): the same instance, its related rows cached on it.
    ``related`` names the model's own foreign keys. Raises ``model.DoesNotExist``."""
    key = (model, tuple(related), lock, using, None, "")
    built = _BUILT.get(key)
    if built is None:
        assert model._meta.pk is not None
        where = f"t0.{connections[using].ops.quote_name(str(model._meta.pk.column))} = %s"
        built = _BUILT[key] = _build(model, related, lock, using, where)
    sql, parts = built
    with connections[using].cursor() as cur:
        cur.execute(sql, [pk])
        row = cur.fetchone()
    if row is None:
        raise model.DoesNotExist(f"no {model.__name__} {pk}")  # type: ignore[attr-defined]
    out = _instances(row, parts, using)
    assert isinstance(out, model)
    return out


def rows_where[M: models.Model](
    model: type[M],
    where: str,
    params: Sequence[Any],
    *,
    related: Sequence[str] = (),
    order_by: str = "",
    limit: int | None = None,
    using: str = "default",
) -> list[M]:
    """``model.objects.select_related(*related)`` filtered by ``where`` (SQL over ``t0``,
    the read model's table, with ``%s`` for each of ``params``), in ``order_by`` (SQL over
    ``t0``), at most ``limit``: the same instances the queryset would make. The statement
    is built once per (model, related, where, order, limit)."""
    key = (model, tuple(related), False, using, where, (order_by, limit))
    built = _BUILT.get(key)
    if built is None:
        tail = (f" ORDER BY {order_by}" if order_by else "") + (
            f" LIMIT {int(limit)}" if limit is not None else ""
        )
        built = _BUILT[key] = _build(model, related, False, using, f"({where})", tail)
    sql, parts = built
    with connections[using].cursor() as cur:
        cur.execute(sql, list(params))
        rows = cur.fetchall()
    out = [_instances(row, parts, using) for row in rows]
    return out  # type: ignore[return-value]  # each is a ``model``: the first part's class


def cache_related(obj: models.Model, name: str, rows: list[Any]) -> None:
    """Hand ``rows`` to ``obj``'s reverse relation ``name`` as ``prefetch_related`` does:
    ``getattr(obj, name).all()`` then returns them without a query. The rows must be the
    whole relation in the order its readers expect (the caller's SELECT says which)."""
    manager = getattr(obj, name)
    for row in rows:  # each row's way back to ``obj``, as the prefetch caches it
        manager.field.set_cached_value(row, obj)
    qs = manager.get_queryset()
    qs._result_cache = rows
    qs._prefetch_done = True
    # Where the reverse manager looks first (Django's prefetch_related_objects fills it too).
    obj.__dict__.setdefault("_prefetched_objects_cache", {})[name] = qs
