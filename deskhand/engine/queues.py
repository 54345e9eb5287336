"""The queues a worker polls, and the kick that makes it poll now.

DBOS polls its queues on a timer; a short interval answers fast and costs CPU all day, a
long one is cheap and slow. So the runs queue and DBOS's internal queue poll rarely
(``DESKHAND_QUEUE_POLL_SEC``, a fallback for a lost notification) and every enqueue
NOTIFYs ``deskhand_queue``, which one LISTEN per worker turns into a poll now. Model
calls of a rate-limited provider wait on a queue of their own, whose limiter counts
starts across every worker (docs/rate-limits.md).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dbos import DBOS
from django.conf import settings

from deskhand.engine.workarounds import queue_kick
from deskhand.infra.dbos.names import INTAKE_QUEUE, QUEUE_CHANNEL, model_queue_name
from deskhand.infra.fleet.lease import libpq_params


def register_queues(poll_sec: float | None = None) -> None:
    # Partitioned by merchant; the cap is generous because a run parked at the
    # gate still counts as in flight, and thousands may be parked at once.
    DBOS.register_queue(
        settings.DESKHAND_QUEUE,
        partition_concurrency=int(os.environ.get("DESKHAND_MERCHANT_CONCURRENCY", "10000")),
        polling_interval_sec=poll_sec if poll_sec is not None else settings.DESKHAND_QUEUE_POLL_SEC,
        on_conflict="always_update",
    )
    # Stored messages and customer lines (engine.intake): a few at a time per worker, so a
    # burst of mail never takes every thread from the runs it opens. Unpartitioned: a
    # merchant's messages are threaded in the order they were stored whichever workflow
    # runs first (deskhand.domain.mail.process.inbound_process), so nothing waits on a slot.
    DBOS.register_queue(
        INTAKE_QUEUE,
        worker_concurrency=settings.DESKHAND_INTAKE_CONCURRENCY,
        polling_interval_sec=poll_sec if poll_sec is not None else settings.DESKHAND_QUEUE_POLL_SEC,
        on_conflict="always_update",
    )


def model_queue(provider: str) -> str | None:
    """The queue a provider's model calls wait on, or None: that provider is not limited."""
    return model_queue_name(provider) if provider in settings.DESKHAND_MODEL_RPM else None


def register_model_queues(
    rpm: dict[str, int] | None = None, period: float | None = None, poll_sec: float | None = None
) -> None:
    """One queue per rate-limited provider: at most RPM starts per period, on every worker.

    DBOS keeps the limiter in ``dbos.queues`` and counts starts across all processes, so
    the limit is the fleet's, not a worker's. Unpartitioned: the limit is the provider
    account's. ``always_update``: the settings of the worker that started last win.
    """
    for provider, limit in (rpm if rpm is not None else settings.DESKHAND_MODEL_RPM).items():
        DBOS.register_queue(
            model_queue_name(provider),
            limiter={
                "limit": limit,
                "period": period or settings.DESKHAND_MODEL_LIMIT_PERIOD_SEC,
            },
            polling_interval_sec=poll_sec or settings.DESKHAND_MODEL_QUEUE_POLL_SEC,
            on_conflict="always_update",
        )


class _Kicker:
    """One LISTEN per worker on ``deskhand_queue``: work enqueued anywhere starts a poll here now.

    DBOS polls its queues on a timer; a short interval answers fast and costs CPU all day,
    a long one is cheap and slow. With this the interval (``DESKHAND_QUEUE_POLL_SEC``) is
    only the fallback for a lost NOTIFY, and pickup waits for a notification, not a tick.
    """

    channel = QUEUE_CHANNEL

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.event: Any = None
        self.waiting = 0  # model calls of this process waiting on a queue (``kicked_while``)
        self._waiting_lock = threading.Lock()

    @contextmanager
    def kicked_while(self) -> Iterator[None]:
        """Kick this worker's queues once a second while the body waits.

        A call held by a queue's limiter starts only when some worker polls after its slot
        frees. Polling every queue fast all day for that cost ~10% of a core per idle
        worker; this polls fast only while a call of this process is actually waiting.
        """
        with self._waiting_lock:
            self.waiting += 1
        try:
            yield
        finally:
            with self._waiting_lock:
                self.waiting -= 1

    def start(self) -> None:
        self.event = queue_kick.install_queue_kick()
        if self.event is None or (self.thread is not None and self.thread.is_alive()):
            return
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="deskhand-queue-kick", daemon=True)
        self.thread.start()

    def kick(self) -> None:
        if self.event is not None:
            self.event.kick()

    def _run(self) -> None:
        import psycopg

        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    **libpq_params(), autocommit=True, application_name="deskhand-queue-kick"
                ) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.kick()  # anything enqueued while we were not listening
                    while not self.stop.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.kick()
                        if self.waiting:
                            self.kick()
            except Exception as exc:
                if not self.stop.is_set():
                    logging.getLogger(__name__).warning("queue kick listener: %s", exc)
                    self.stop.wait(1.0)

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None and self.thread.is_alive():
            # Wake the listener now rather than at its next one-second timeout (a stopping
            # worker, and every test that stops the in-process executor, waited that second).
            # Other workers on the channel take it as one more kick: a queue poll, no more.
            self._wake()
            self.thread.join(3)
        self.thread = None

    def _wake(self) -> None:
        import psycopg

        params = {**libpq_params(), "connect_timeout": 2}
        try:
            with psycopg.connect(
                **params, autocommit=True, application_name="deskhand-queue-kick"
            ) as conn:
                conn.execute(f"NOTIFY {self.channel}")
        except Exception:  # the database is gone: the timeout ends the wait instead
            pass


_kicker = _Kicker()


def kick_queues() -> None:
    """Make this worker's queue threads poll now (after enqueueing work it may take itself)."""
    _kicker.kick()


def queues_kicked_while_waiting() -> AbstractContextManager[None]:
    """While the body runs, this worker's queues poll at least once a second."""
    return _kicker.kicked_while()


def start_kicker() -> None:
    _kicker.start()


def halt_kicker() -> None:
    _kicker.halt()
