"""The project: settings, URLs, ASGI/WSGI, the embedded Postgres and DBOS, around the apps.

A module's folder names its layer, top to bottom: ``web`` (the console, the JSON API,
inbound webhooks) and ``engine`` (DBOS runs the agent here), then ``agent`` and
``approvals`` beside this package, then ``domain`` (the desk, mail, API keys, the CLI's
conventions) and ``infra`` (the DBOS client and names, the web edge's guards, the fleet,
retries, events, the embedded Postgres). The order is ``[tool.importlinter]`` in
pyproject.toml."""
