"""Trajectory evals: scenarios that attack the five invariants (and resilience), and their runner.

Each scenario drives real runs through the real loop on a real DBOS executor
and asserts on the path the run took — the tool calls with their canonical
arguments, the approvals and who decided them, the effects on the world — and
on its terminal state. They run under pytest (``tests/evals``) and as
``python manage.py evals``, which works in a scratch database it creates and
drops. ``docs/evals.md`` says what each one attacks.
"""
