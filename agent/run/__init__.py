"""A run's life: how it starts, works its turns, stays in bounds, is steered, and ends truthfully.

Owns the writes from outside a run's workflow (``services``: start, cancel, close), reading
a run (``selectors``), the step functions the workflow runs durably (``lifecycle``,
``turns``, ``bounds``, ``steering``), the one writer of step rows (``steplog``) and what
each row records (``payloads``), the reconciler that keeps runs and workflows in agreement
(``reconciler``), and the test-only fault hooks (``faults``). May import the conversation,
the ledger, consent, tools, providers, ``approvals``, the desk and ``deskhand.infra.dbos`` client and names — never
the engine (``deskhand.engine``) nor the console. One exception, in one place: the
reconciler adopts forks made with DBOS's own tools through ``agent.replay.fork``, the one
home of forks. What it found is recorded by ``workflow_findings``.
"""
