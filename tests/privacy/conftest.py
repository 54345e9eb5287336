"""The console's fixtures, for the privacy pages and the runs built from rows."""

from __future__ import annotations

from tests.console.conftest import fake_dbos, nw_owner

__all__ = ["fake_dbos", "nw_owner"]
