"""Development tools: the trajectory evals, the crash sweep, the crash worker and model doubles.

A Django app (``manage.py evals``, ``manage.py crash_sweep``) that settings install only
when this package is importable, i.e. from a checkout. It lives under ``tests/`` so the
product wheel never ships it: nothing in ``deskhand``, ``agent`` or ``approvals`` imports it.
"""
