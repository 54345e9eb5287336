"""ASGI entry point: ``python -m uvicorn deskhand.asgi:application``.

The web process never launches DBOS; it enqueues and sends through a
``DBOSClient`` (deskhand/dbos/client.py).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
application = get_asgi_application()
