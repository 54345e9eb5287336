"""``python -m tests.devtools.load.worker EXECUTOR_ID``: a real ``manage.py worker`` whose runs use the load model.

The bench and ``chaos`` start their workers this way, so every run of a load is played by
``tests.devtools.load.world.LoadProvider`` (``QUICK-`` tickets finish, the rest park at the gate)
in whatever process executes it. Nothing in the product reads a flag for this: only this
launcher installs the override, in its own process.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from agent.providers import install_override
    from tests.devtools.bench import without
    from tests.devtools.load.world import LoadProvider

    install_override("*", LoadProvider())
    without.apply()  # DESKHAND_BENCH_WITHOUT: a workaround switched off, for the bench
    call_command("worker", executor_id=argv[1], reconcile_every=2.0)


if __name__ == "__main__":
    main(sys.argv)
