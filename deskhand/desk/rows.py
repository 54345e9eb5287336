"""One row by primary key, with its foreign keys' rows, read through a statement built once.

The agent's steps read the run (with its merchant or ticket) several times a run. Through a
queryset, each read compiles its SQL again and walks ``select_related``'s machinery: about
three quarters of such a read's CPU (docs/benchmarks.md, "Cost per step"). ``row_by_pk``
builds the same SELECT once per model, related set and lock, from the models' metadata,
and makes the instances as the ORM would — every field's own conversion from the database,
the related rows cached on the instance as ``select_related`` caches them.
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
    fk: Any  # the foreign key of the read model it hangs off; None for that model itself


# (model, related, lock, alias) -> (SQL, one part per model read)
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
    model: type[models.Model], related: Sequence[str], lock: bool, alias: str
) -> tuple[str, list[_Part]]:
    conn = connections[alias]
    q = conn.ops.quote_name
    cols, first = _part(model, alias, "t0", None)
    parts = [first]
    joins = []
    for i, name in enumerate(related, start=1):
        fk = model._meta.get_field(name)
        if not isinstance(fk, models.ForeignKey):
            raise TypeError(f"{model.__name__}.{name} is not a foreign key")
        target = fk.related_model
        assert isinstance(target, type)
        rcols, part = _part(target, alias, f"t{i}", fk)
        cols += rcols
        parts.append(part)
        join = "LEFT JOIN" if fk.null else "JOIN"
        joins.append(
            f"{join} {q(target._meta.db_table)} t{i}"
            f" ON t{i}.{q(str(fk.target_field.column))} = t0.{q(str(fk.column))}"
        )
    assert model._meta.pk is not None
    pk = q(str(model._meta.pk.column))
    sql = (
        f"SELECT {', '.join(cols)} FROM {q(model._meta.db_table)} t0 {' '.join(joins)}"
        f" WHERE t0.{pk} = %s" + (" FOR UPDATE OF t0" if lock else "")
    )
    return sql, parts


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
    ``related`` names foreign keys of ``model`` itself. Raises ``model.DoesNotExist``."""
    key = (model, tuple(related), lock, using)
    built = _BUILT.get(key)
    if built is None:
        built = _BUILT[key] = _build(model, related, lock, using)
    sql, parts = built
    conn = connections[using]
    with conn.cursor() as cur:
        cur.execute(sql, [pk])
        row = cur.fetchone()
    if row is None:
        raise model.DoesNotExist(f"no {model.__name__} {pk}")  # type: ignore[attr-defined]
    start, instances = 0, list[models.Model]()
    for part in parts:
        values = list(row[start : start + len(part.attnames)])
        start += len(part.attnames)
        if part.fk is not None and values[part.pk_index] is None:  # a key holding no row
            part.fk.set_cached_value(instances[0], None)
            continue
        for i, (col, convs) in enumerate(part.converters):
            for convert in convs:
                values[i] = convert(values[i], col, conn)
        obj = part.cls.from_db(using, part.attnames, values)
        if part.fk is not None:
            part.fk.set_cached_value(instances[0], obj)
        instances.append(obj)
    out = instances[0]
    assert isinstance(out, model)
    return out
