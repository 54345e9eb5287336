"""ASGI entry point, served by ``python manage.py web`` (deskhand/infra/edge/web.py).

Start it that way rather than with the bare ``uvicorn`` command, whose default trust of
``X-Forwarded-For`` from loopback would let a client pick the address the sign-in
throttle counts.

The web process never launches DBOS; it enqueues and sends through a
``DBOSClient`` (deskhand/infra/dbos/client.py).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
application = get_asgi_application()
