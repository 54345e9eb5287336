"""DBOS, in one package: the only one that imports ``dbos``. Two layers, one above the apps, one below.

- ``client`` and ``names`` are the lower layer, below ``agent`` and ``approvals``: what web,
  CLI and the reconciler say to DBOS (enqueue, send, cancel, fork, inspect) and the names
  DBOS persists. They import no app.
- ``engine`` is the upper layer, above every app: the workflows and schedules a worker
  runs, the bootstrap that launches DBOS, its queues, recovery and the workarounds of DBOS internals we
  rely on. It imports the apps' step functions; no app imports it.

``pyproject.toml``'s import contracts hold both rules (docs/architecture.md).
"""
