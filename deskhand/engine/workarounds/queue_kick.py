"""The queue kick: DBOS's queue threads poll when work is enqueued, not at their next tick.

**Changes** DBOS 3.4's queue threads, which sleep ``polling_interval_sec`` on the queue
manager's stop event and wake for nothing else: the event's class is swapped for
``KickableEvent``, so one LISTEN per worker (``deskhand.engine.queues``) starts a poll
when work is enqueued and the interval can be long (5 s: cheap idle). ``kickable_from_launch``
swaps the ``queue_thread`` that ``DBOS._launch`` starts, so no first sleep is deaf.

**Buys** (``bench --quick``, with / without): enqueue → first step p95 76-79 / 5,031 ms;
without ``kickable_from_launch`` alone, restart → the decided runs resumed 0.95-1.94 / 8.1 s
and SIGKILL → resumed 3.7-4.5 / 9.9 s.

**Retired by** a public way to wake a queue (``Queue.notify()``, or DBOS polling on its own
NOTIFY when a workflow is enqueued).
"""

from __future__ import annotations

import threading
from typing import Any


class KickableEvent(threading.Event):
    """A ``threading.Event`` whose sleepers can be woken early without the event being set.

    ``wait`` returns the flag, never whether it was notified: a kick makes DBOS's queue
    worker poll at once, a real ``set()`` still stops it. A kick latches per thread: a
    queue worker that was busy polling when the kick came (so not asleep to hear it) finds
    it on its next ``wait`` and polls again at once, instead of sleeping out a whole
    interval with the kicked work still queued.
    """

    _kicks: int
    _seen: dict[int, int]

    def wait(self, timeout: float | None = None) -> bool:
        me = threading.get_ident()
        with self._cond:  # type: ignore[attr-defined]
            if not self._flag and self._seen.get(me, self._kicks) == self._kicks:  # type: ignore[attr-defined]
                self._cond.wait(timeout)  # type: ignore[attr-defined]
            self._seen[me] = self._kicks
            return bool(self._flag)  # type: ignore[attr-defined]

    def kick(self) -> None:
        with self._cond:  # type: ignore[attr-defined]
            self._kicks += 1
            self._cond.notify_all()  # type: ignore[attr-defined]

    def set(self) -> None:
        """Stop every sleeper, also those still in the old ``wait()`` on the old condition.

        For them a notify means "stopped", which is now the truth; without it, DBOS's
        shutdown waited out the queue manager's one-second interval after every launch.
        """
        super().set()
        for cond in getattr(self, "_retired", ()):
            with cond:
                cond.notify_all()


def _kickable_queue_thread(stop_event: threading.Event, dbos: Any) -> None:
    """DBOS's queue manager, its stop event made kickable before any queue thread waits."""
    from dbos._queue import queue_thread

    if type(stop_event) is threading.Event:
        make_kickable(stop_event)
    queue_thread(stop_event, dbos)


def kickable_from_launch() -> None:
    """Have the next ``DBOS.launch()`` start its queue manager on a kickable stop event
    (``DBOS.launch`` looks ``queue_thread`` up in its own module): made kickable only after
    launch, the queue threads started at launch slept their first interval deaf to kicks."""
    import dbos._dbos as dbos_module

    dbos_module.queue_thread = _kickable_queue_thread


def install_queue_kick() -> KickableEvent | None:
    """Make this executor's queue threads wakeable; the event to ``kick()`` (None: not found)."""
    from dbos._dbos import _get_dbos_instance
    from dbos._queue import queue_thread

    dbos = _get_dbos_instance()
    for thread in dbos._background_threads:
        if getattr(thread, "_target", None) in (queue_thread, _kickable_queue_thread):
            event = thread._args[0]  # type: ignore[attr-defined]
            if type(event) is threading.Event:
                make_kickable(event)
            return event if isinstance(event, KickableEvent) else None
    return None


def make_kickable(event: threading.Event) -> KickableEvent:
    """Turn a plain ``threading.Event`` that threads may already sleep on into a kickable one.

    A thread already sleeping in the old ``wait()`` must never be kicked: that ``wait()``
    would report "stopped" and its queue thread would exit. So kicks go to a new condition,
    and old sleepers finish their interval on the old one — unless the event is really set,
    which ``KickableEvent.set`` passes on to the retired condition too.
    """
    with event._cond:  # type: ignore[attr-defined]
        event._retired = [event._cond]  # type: ignore[attr-defined]
        event._kicks, event._seen = 0, {}  # type: ignore[attr-defined]
        event._cond = threading.Condition(threading.Lock())  # type: ignore[attr-defined]
        event.__class__ = KickableEvent
    return event  # type: ignore[return-value]
