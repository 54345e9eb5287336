"""Waiting in the tests: poll for a condition, with a deadline a loaded machine still meets.

On a 2-core machine with other work beside it (load 7 to 15) the suite failed twice where it
passes alone (issue 40): a run "stayed awaiting_approval for 60 s", a deadline the loaded
machine missed, and ``Run.DoesNotExist``, because a helper read the run once before it
started polling and the worker had not written it yet. So every wait here asks its question
first and on every pass (nothing is read before the first poll), gives the machine
``PATIENCE_S`` unless the test measures time itself, and when it gives up says what it waited
for and what it saw last.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# Three times the 60 s the loaded machine missed, and inside pytest-timeout's 300 s per test, so
# a wait that gives up still reports its own sentence rather than a stack dump.
PATIENCE_S = float(os.environ.get("DESKHAND_TEST_PATIENCE_S", "180"))


def until[T](
    what: str,
    check: Callable[[], T],
    *,
    timeout: float = PATIENCE_S,
    every: float = 0.05,
    seen: Callable[[], object] | None = None,
) -> T:
    """``check()``'s first truthy answer, polled every ``every`` seconds for ``timeout``.

    ``what`` completes "waited N s for …"; ``seen``, when given, describes the state that was
    found instead, read once more at the moment of giving up.
    """
    end = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= end:
            break
        time.sleep(every)
    last = f"; last seen: {seen()}" if seen is not None else ""
    raise AssertionError(f"waited {timeout:.0f} s for {what}{last}")


# The same patience for Playwright's own waits, which take milliseconds.
PATIENCE_MS = PATIENCE_S * 1000
