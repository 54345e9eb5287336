"""A run's life: how it starts, works its turns, stays in bounds, is steered, and ends truthfully.

Owns the writes from outside a run's workflow (``services``: start, cancel, close), reading
a run (``selectors``), the step functions the workflow runs durably (``lifecycle``,
``turns``, ``bounds``, ``steering``), what ends a run (``stops``) and what the reconciler
found (``workflow_findings``). The step record itself — the one writer of step rows and
the fault hooks — is below it, in ``agent.record``; the reconciler is in ``agent.ops``.
Never imports the engine (``deskhand.engine``) nor the console.
"""
