"""Every use of DBOS's private internals: one module per workaround, each pinned by a test.

``dbos`` is pinned in pyproject.toml, and ``tests/durability/test_dbos_pins.py`` fails,
naming the module here that relies on it, if an upgrade changes any private function used
here. Each module's docstring says which DBOS behaviour it changes, what that buys
(``bench`` with and without it: docs/benchmarks.md, "What the workarounds buy") and the
upstream change that would retire it.
"""
