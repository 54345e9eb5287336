"""The web process, started one way everywhere: ``python manage.py web``.

Why a launcher and not the bare ``uvicorn`` command: uvicorn believes
``X-Forwarded-For`` and ``X-Forwarded-Proto`` from loopback by default (its
``--forwarded-allow-ips`` falls back to ``$FORWARDED_ALLOW_IPS`` or
``127.0.0.1,::1``) and rewrites the client address before Django sees it. A
client on the same machine, or any client of a proxy that passes the header
through, could then name its own address, and the sign-in throttle
(``deskhand.infra.edge.throttle``), keyed on that address, counted every forged one
apart. Here the only trust is ``DESKHAND_TRUSTED_PROXIES``: with none, uvicorn's
proxy handling is off and ``REMOTE_ADDR`` is the peer; with some, uvicorn
believes the headers from exactly those addresses or networks, the same list the
throttle reads, and nothing in the environment widens it.

The README, ``make demo`` (``scripts/demo.py``) and the tests' real-server
fixtures (``tests/console/conftest.py``) all start the web process through
this module.
"""

from __future__ import annotations

from typing import Any

import uvicorn

from deskhand.infra.edge.throttle import trusted_proxies

APPLICATION = "deskhand.asgi:application"
# A live page holds a Server-Sent Events stream open; on SIGTERM uvicorn would wait for
# every one of them to end. Past this many seconds it closes them (the browser reconnects
# to the next process), so a deploy or a Ctrl-C never hangs on an open tab.
GRACEFUL_SHUTDOWN_SECONDS = 5


def proxy_trust() -> dict[str, Any]:
    """uvicorn's proxy settings from ``DESKHAND_TRUSTED_PROXIES`` alone.

    The networks are written out canonically (``10.0.0.1/8`` becomes ``10.0.0.0/8``):
    uvicorn takes an entry it cannot parse as a literal host name that never matches,
    so a list the throttle accepts must reach uvicorn in a form it reads the same way.
    Raises ``ImproperlyConfigured`` for an entry that is not an address or network.
    """
    nets = [str(n) for n in trusted_proxies()]
    # An explicit list, never None: None would make uvicorn read $FORWARDED_ALLOW_IPS.
    return {"proxy_headers": bool(nets), "forwarded_allow_ips": nets}


def web_config(
    *, host: str, port: int, log_level: str = "info", access_log: bool = True
) -> uvicorn.Config:
    """The uvicorn configuration of Deskhand's web process."""
    return uvicorn.Config(
        APPLICATION,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        lifespan="off",  # Django's ASGI handler has no lifespan protocol
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        **proxy_trust(),
    )


def serve(*, host: str, port: int, log_level: str = "info", access_log: bool = True) -> None:
    """Run the web process in this process until SIGINT or SIGTERM."""
    uvicorn.Server(
        web_config(host=host, port=port, log_level=log_level, access_log=access_log)
    ).run()
