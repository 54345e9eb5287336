"""Every use of DBOS's private internals, one module per workaround, each pinned by a test.

``dbos`` is pinned to one version in pyproject.toml, and
``tests/durability/test_dbos_pins.py`` fails — naming the function and the module here that
relies on it — if an upgrade changes any private internal used here, so an upgrade re-reads
this folder before it ships. Each module's docstring says which DBOS behaviour it changes,
what that buys (measured with and without it in ``bench``), and the upstream change that
would retire it:

* ``queue_kick`` — queue threads poll when work is enqueued, not at their next tick;
* ``internal_queue_poll`` — DBOS's own queue polled rarely, not every second;
* ``recv_recheck`` — one inbox sweep per worker instead of a timer per parked ``recv``;
* ``staged_recovery`` — a restarted worker's parked runs handed back in batches;
* ``executor_recovery`` — takeover of a dead executor's runs, and our own stranded ones;
* ``version_move`` — parked runs moved to a new application version.
"""
