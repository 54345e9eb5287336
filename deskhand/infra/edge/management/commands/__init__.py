"""The web process command (``manage.py web``: uvicorn serving ``deskhand.asgi``)."""
