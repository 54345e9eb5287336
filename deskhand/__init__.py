"""The project: settings, URLs, ASGI/WSGI, the embedded Postgres and DBOS, around the apps.

Its sub-packages span every layer, from the domain (``desk``) and the DBOS client at the
bottom to the console, the JSON API and the engine at the top; each one's ``__init__`` says
which (the order is ``[tool.importlinter]`` in pyproject.toml)."""
