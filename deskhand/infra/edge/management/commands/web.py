"""``python manage.py web``: the web process (uvicorn serving ``deskhand.asgi``).

The one way to start it, used by the README, ``make demo`` and the tests; its proxy
trust comes from ``DESKHAND_TRUSTED_PROXIES`` only (``deskhand/infra/edge/web.py`` says why).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from deskhand.infra.edge import web


class Command(BaseCommand):
    help = (
        "Serve the console, the admin and /healthz over HTTP (uvicorn). X-Forwarded-For and "
        "X-Forwarded-Proto are believed only from DESKHAND_TRUSTED_PROXIES."
    )
    # The checks ask the database (a GeneratedField reads the server's version): a web
    # process started while Postgres restarts must come up and answer 503 pages, not exit.
    # `manage.py check --deploy` is where the checks run.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--host",
            default=os.environ.get("DESKHAND_HOST", "127.0.0.1"),
            help="Address to listen on (env DESKHAND_HOST; default 127.0.0.1).",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("DESKHAND_PORT") or 8000),
            help="Port to listen on (env DESKHAND_PORT; default 8000).",
        )
        parser.add_argument(
            "--log-level",
            default="info",
            choices=["critical", "error", "warning", "info", "debug"],
            help="uvicorn's log level (default info).",
        )
        parser.add_argument(
            "--no-access-log",
            action="store_true",
            help="Do not log one line per request.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            web.proxy_trust()
        except ImproperlyConfigured as exc:
            raise CommandError(f"{exc}; no web process was started.") from None
        web.serve(
            host=opts["host"],
            port=opts["port"],
            log_level=opts["log_level"],
            access_log=not opts["no_access_log"],
        )
