"""Parked runs: one inbox sweep per worker instead of one re-check timer per waiting ``recv``.

**Changes** DBOS 3.4's per-``recv`` re-check of the database every 60 s (in case a NOTIFY
was lost; a class attribute, not a setting): ``stretch_recv_recheck`` sets it to
``DESKHAND_RECV_RECHECK_SEC`` on this executor, and ``sweep_waiting_recvs`` reads
``notifications_map`` to re-check every waiting ``recv`` in one query, every
``DESKHAND_RECV_SWEEP_SEC`` and after a reconnect (docs/scaling.md, "Parked runs").

**Buys** (``bench --quick --parked 2000 --window 60``, with / without): the executor idle
with 2,000 parked, 1.6 / 6.9 % of a core and 13 / 79 commits a second. (At 300 parked and
a 20-s window the difference was inside the noise: most timers had not fired yet.)

**Retired by** DBOS re-checking its waiting ``recv``s in one batched query.
"""

from __future__ import annotations

from typing import Any

from django.db import connection


def _sys_db() -> Any:
    from dbos._dbos import _get_dbos_instance

    return _get_dbos_instance()._sys_db


def stretch_recv_recheck(seconds: float) -> None:
    """Make each waiting ``recv`` re-check the database only every ``seconds`` on its own."""
    _sys_db()._notification_fallback_polling_interval = float(seconds)


def waiting_recvs() -> int:
    return len(_sys_db().notifications_map.snapshot())


def sweep_waiting_recvs(batch: int = 5000) -> int:
    """Wake every waiting ``recv`` that has an unconsumed message: one query per batch of waiters.

    The safety net for a lost NOTIFY (a listener reconnecting after a Postgres restart),
    done for all of this worker's parked runs at once. Returns how many it woke.
    """
    try:
        sysdb = _sys_db()
    except Exception:
        return 0  # no executor in this process (any more): nothing waits here
    if sysdb is None:
        return 0
    waiting = sysdb.notifications_map.snapshot()
    if not waiting:
        return 0
    by_key: dict[tuple[str, str], Any] = {}
    for _payload, (dest, topic, _shard), signal in waiting:
        by_key[(dest, topic)] = signal
    keys = list(by_key)
    woke = 0
    with connection.cursor() as cur:
        for i in range(0, len(keys), batch):
            chunk = keys[i : i + batch]
            cur.execute(
                "SELECT DISTINCT n.destination_uuid, n.topic FROM dbos.notifications n"
                " JOIN unnest(%s::text[], %s::text[]) AS w(dest, topic)"
                " ON n.destination_uuid = w.dest AND n.topic = w.topic"
                " WHERE n.consumed = false",
                [[k[0] for k in chunk], [k[1] for k in chunk]],
            )
            for dest, topic in cur.fetchall():
                signal = by_key.get((dest, topic))
                if signal is not None:
                    signal.set()  # each waiter re-reads the table; a spurious wake is harmless
                    woke += 1
    return woke
