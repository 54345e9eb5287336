"""Infrastructure, the lowest layer: the DBOS client and persisted names (``dbos``),
the web edge's guards (``edge``), the worker fleet (``fleet``), retry policies, run
events, crash points and the embedded Postgres. It imports no app and no domain."""
