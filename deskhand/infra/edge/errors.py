"""Telling "the database is down or restarting" (or "not migrated") apart from every other error.

Django, psycopg and SQLAlchemy (which DBOS uses) each have their own classes
for it; a wrapper may hide the original in its ``__cause__`` or ``__context__``.
"""

from __future__ import annotations

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError


def _unavailable_types() -> tuple[type[BaseException], ...]:
    import psycopg

    found: list[type[BaseException]] = [
        DjangoOperationalError,
        DjangoInterfaceError,
        psycopg.OperationalError,
        psycopg.InterfaceError,
    ]
    try:
        from sqlalchemy import exc as sa_exc
    except ImportError:  # pragma: no cover - DBOS brings SQLAlchemy
        pass
    else:
        found += [sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError]
    return tuple(found)


UNAVAILABLE = _unavailable_types()


def _caused_by(exc: BaseException | None, types: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` or anything in its cause/context chain is one of ``types``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, types):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def is_database_unavailable(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what it wraps) says the database could not be reached or used."""
    return _caused_by(exc, UNAVAILABLE)


def is_database_unmigrated(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what it wraps) is a query on a table that does not exist yet:
    the database is reachable but nobody ran ``migrate`` on it."""
    import psycopg

    return _caused_by(exc, (psycopg.errors.UndefinedTable,))


def database_detail(exc: BaseException) -> str:
    """The driver's first line, without the noise (for a one-sentence message)."""
    lines = str(exc).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else ""
    return text[:160].rstrip(" .") if text else type(exc).__name__
