"""Schemathesis's hooks for ``test_real_server_api.py``'s run (``SCHEMATHESIS_HOOKS``).

One, for the ``Idempotency-Key``: schemathesis draws it with the rest of the request, so
the same small key ("0") comes back with other bodies, and the server rightly refuses the
second as a reused key (422) — a rule about what was sent before, which no schema can say.
A real client sends one key per request; so does this hook, by suffixing the drawn key with
the request's own fingerprint. The same request drawn twice keeps the same key, so replays
are still exercised; the 422 itself is pinned by ``test_contract.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

import schemathesis

# The test passes the server's own rule (``deskhand.domain.apikeys.store``: importing it here would
# need Django set up in schemathesis's process).
KEY = re.compile(os.environ["DESKHAND_KEY_PATTERN"])
KEY_MAX = int(os.environ["DESKHAND_KEY_MAX"])


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if case.meta is None or not case.meta.generation.mode.is_positive:
        # A request meant to be refused stays as drawn: an edit here makes schemathesis
        # judge it again, and one drawn without its Authorization would then be sent with it.
        return
    headers = case.headers or {}
    drawn = headers.get("Idempotency-Key")
    if not isinstance(drawn, str) or not KEY.match(drawn):
        return  # a key the schema calls invalid is sent as drawn, to be refused
    request = json.dumps([case.method, case.formatted_path, case.body], sort_keys=True, default=str)
    suffix = "-" + hashlib.sha256(request.encode()).hexdigest()[:16]
    headers["Idempotency-Key"] = drawn[: KEY_MAX - len(suffix)].rstrip() + suffix
