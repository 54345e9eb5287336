"""The engine: where DBOS executes. Workflows, schedules, bootstrap, queues, recovery, and
the workarounds of DBOS's private internals (``workarounds``, one module each).

A Django app (``deskhand.engine``, label ``engine``) so that loading it registers the
workflows and schedules in every process, and so that the ``worker`` and ``move_runs``
commands live beside what they start. The top layer: it may import every app; nothing in
``agent``, ``approvals`` or the console imports it.
"""
