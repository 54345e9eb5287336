"""DBOS's lower half, below every app: ``client`` (what web, CLI and the reconciler say to
DBOS: enqueue, send, cancel, fork, inspect) and ``names`` (every name DBOS persists). They
import no app. The upper half, which runs the apps' step functions, is the engine
(``deskhand.engine``); only these two packages import ``dbos`` (docs/architecture.md).
"""
