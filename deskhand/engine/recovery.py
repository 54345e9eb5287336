"""Parked runs after a restart: staged recovery, and the sweep that re-checks their inboxes.

A parked run waits in ``DBOS.recv_async``; DBOS re-checks each waiting recv's inbox on its
own only every ``DESKHAND_RECV_RECHECK_SEC``, so one thread per process does it for all of
them at once (``sweep_waiting_recvs``) every ``DESKHAND_RECV_SWEEP_SEC``, and at once after
a reconnect, when NOTIFYs may have been lost (docs/scaling.md, "Parked runs").
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import close_old_connections

from deskhand.engine.queues import kick_queues
from deskhand.engine.workarounds import recv_recheck, staged_recovery
from deskhand.infra import events


class _Sweeper:
    """The one thread per process that re-checks every parked run's inbox (one query)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()

    def start(self, every: float) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(every,), name="deskhand-recv-sweep", daemon=True
        )
        self.thread.start()

    def _run(self, every: float) -> None:
        while not self.stop.is_set():
            self.wake.wait(every)
            self.wake.clear()
            if self.stop.is_set():
                return
            try:
                close_old_connections()
                recv_recheck.sweep_waiting_recvs()
            except Exception as exc:  # a sweep that fails is retried next time
                logging.getLogger(__name__).warning("recv sweep failed: %s", exc)
            finally:
                close_old_connections()

    def halt(self) -> None:
        self.stop.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(5)
        self.thread = None


_sweeper = _Sweeper()


class StagedRecovery(threading.Thread):
    """Hands a restarted worker's staged parked runs back (``workarounds.staged_recovery``):
    ``batch`` at a time while fewer than ``max_replaying`` replay here or wait to be dequeued,
    runs with a message waiting first in every batch. Only while the lease holds."""

    def __init__(
        self,
        executor_id: str,
        app_version: str,
        confirmed: Any,
        batch: int = 32,
        max_replaying: int = 64,
    ) -> None:
        super().__init__(name="deskhand-staged-recovery", daemon=True)
        self.executor_id, self.app_version = executor_id, app_version
        self.confirmed, self.batch, self.max_replaying = confirmed, batch, max_replaying
        self.stop = threading.Event()
        self.released = 0

    def run(self) -> None:
        t0 = time.monotonic()
        # Released but not yet dequeued: not running here yet, so ``replaying()`` misses
        # them. Uncounted, the next batches went out before the first was picked up, and
        # one poll of the (unpartitioned, oldest-first) internal queue then took them all
        # with the decided run behind older ones.
        queued: list[str] = []
        while not self.stop.is_set():
            try:
                if not self.confirmed():
                    self.stop.wait(0.05)
                    continue
                close_old_connections()
                queued = staged_recovery.still_enqueued(queued)
                if staged_recovery.replaying() + len(queued) >= self.max_replaying:
                    self.stop.wait(0.05)
                    continue
                released, left = staged_recovery.release_staged(
                    self.executor_id, self.app_version, self.batch
                )
                queued += released
                self.released += len(released)
                kick_queues()
                if left == 0:
                    events.emit(
                        "worker.recovered",
                        executor_id=self.executor_id,
                        runs=self.released,
                        seconds=round(time.monotonic() - t0, 2),
                    )
                    return
                self.stop.wait(0.05)
            except Exception as exc:  # the database may be restarting: try again shortly
                logging.getLogger(__name__).warning("staged recovery: %s", exc)
                self.stop.wait(1.0)
            finally:
                close_old_connections()


def start_recv_sweep(every: float) -> None:
    _sweeper.start(every)


def halt_recv_sweep() -> None:
    _sweeper.halt()


def sweep_now() -> None:
    """Re-check every parked run's inbox at once (after a reconnect: NOTIFYs may be lost)."""
    _sweeper.wake.set()
