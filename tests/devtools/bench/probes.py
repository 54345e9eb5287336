"""Measuring tools for the bench: percentiles, process facts, a NOTIFY listener, a progress bar."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import psycopg

BENCH_APP = "deskhand-bench"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: list[float]) -> float:
    return pct(values, 50)


def cpu_seconds(pid: int | None = None) -> float:
    t = psutil.Process(pid).cpu_times() if pid else os.times()
    return float(t.user + t.system)


def rss_mb(pid: int | None = None) -> float:
    return float(psutil.Process(pid or os.getpid()).memory_info().rss) / 1024 / 1024


def threads(pid: int | None = None) -> int:
    return int(psutil.Process(pid or os.getpid()).num_threads())


def machine() -> dict[str, Any]:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(psutil.virtual_memory().total / 1024**3),
        "load_1m": round(os.getloadavg()[0], 1),
        "python": sys.version.split()[0],
    }


def until(predicate: Callable[[], bool], timeout: float, every: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return False


def commits(conninfo: dict[str, Any]) -> int:
    """Transactions committed in the bench's scratch database so far (every session's)."""
    with psycopg.connect(**conninfo, autocommit=True, application_name=BENCH_APP) as c:
        row = c.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [conninfo["dbname"]]
        ).fetchone()
        return int(row[0]) if row else 0


def idle_rates(
    cpu: Callable[[], float], conninfo: dict[str, Any], window: float
) -> tuple[float, float]:
    """A process's CPU (% of one core) and the database's commits/s over ``window`` seconds.

    The one reading of "idle" every figure shares, so the in-process executor and a real
    worker are measured alike. The commit counts are read outside the CPU interval (each
    opens a connection), and the first count's own transaction is taken off.
    """
    n0 = commits(conninfo)
    cpu0, t0 = cpu(), time.monotonic()
    time.sleep(window)
    busy, dt = cpu() - cpu0, time.monotonic() - t0
    return busy / dt * 100, (commits(conninfo) - n0 - 1) / dt


def settle(cpu: Callable[[], float], slice_s: float, timeout: float) -> bool:
    """Wait until a process is quiet: two ``slice_s`` slices in a row under a tenth of a core.

    What follows a burst (replays reaching their gate, a garbage collection of the objects
    the burst left) belongs to the burst, not to holding the runs: after a fixed 10-s pause
    one 10,000-run hand-over's idle window held a 1.1-CPU-s burst no later sweep repeated
    (docs/scaling.md). False if the process never settled within ``timeout``.
    """
    quiet, deadline = 0, time.monotonic() + timeout
    while quiet < 2 and time.monotonic() < deadline:
        c0 = cpu()
        time.sleep(slice_s)
        quiet = quiet + 1 if (cpu() - c0) / slice_s < 0.1 else 0
    return quiet >= 2


class GcClock:
    """Seconds this process spent in the garbage collector while the block ran.

    An idle figure can hide a collection: a full one walks every object the parked runs
    hold, whichever thread happened to allocate when it was due.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.full += info.get("generation") == 2

    def __enter__(self) -> GcClock:
        import gc

        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        import gc

        gc.callbacks.remove(self._cb)


class Listener:
    """LISTEN deskhand_steps on its own connection; remembers when each payload arrived."""

    def __init__(self, conninfo: dict[str, Any]) -> None:
        self.conn = psycopg.connect(**conninfo, autocommit=True, application_name=BENCH_APP)
        self.conn.execute("LISTEN deskhand_steps")
        self.seen: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-listen", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for note in self.conn.notifies(timeout=0.2):
                now = time.perf_counter()
                with self.cond:
                    self.seen.setdefault(note.payload, now)
                    self.cond.notify_all()

    def wait_for(self, payload: str, timeout: float) -> float | None:
        end = time.monotonic() + timeout
        with self.cond:
            while payload not in self.seen:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.seen[payload]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.conn.close()


class Progress:
    """One line on stderr: ``[#####-----] 45% (3:12) parking 5000 runs``; phase lines when not a TTY."""

    def __init__(self, total: float, stream: Any = None) -> None:
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()
        self.label = ""

    def phase(self, label: str) -> None:
        self.label = label
        if not self.tty:
            self.stream.write(f"  … {label} ({self._elapsed()})\n")
            self.stream.flush()
        self.draw()

    def advance(self, amount: float, note: str = "") -> None:
        self.done = min(self.total, self.done + amount)
        self.draw(note)

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60}:{s % 60:02d}"

    def draw(self, note: str = "") -> None:
        if not self.tty:
            return
        frac = self.done / self.total
        bar = "#" * int(frac * 30)
        self.stream.write(
            f"\r[{bar:<30}] {frac * 100:3.0f}% ({self._elapsed()}) {self.label} {note}"[:120].ljust(
                120
            )
        )
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()
