"""Test-only launcher: a real worker with crash points installed in *this* process.

Usage: worker_with_faults.py EXECUTOR_ID "point:tool[:nth],..."
A fault spec names a crash point in agent/tools/execute.py or a step boundary
and the tool it applies to; the process SIGKILLs itself there (on the nth
time, default 1st). The product has no switch for this: only this script,
which lives under tests/, installs faults.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402

from agent import faults  # noqa: E402


def install(spec: str) -> None:
    for item in filter(None, spec.split(",")):
        parts = item.split(":")
        point, tool = parts[0], parts[1]
        nth = int(parts[2]) if len(parts) > 2 else 1
        counter = {"n": 0}

        def action(counter: dict[str, int] = counter, nth: int = nth) -> None:
            counter["n"] += 1
            if counter["n"] == nth:
                faults.sigkill_self()

        faults.install(point, tool, action)


if __name__ == "__main__":
    executor_id, spec = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    install(spec)
    call_command("worker", executor_id=executor_id, reconcile_every=1.0)
