"""Django's Postgres backend, starting the embedded server before a process's first connection.

Settings name this backend (``ENGINE = "deskhand.infra.embedded_db"``) only when no
``DATABASE_URL`` is set, so importing settings starts nothing and a process that
never touches the database never starts Postgres.
"""
