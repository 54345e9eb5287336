"""A tiny program for the fork server's own tests: ``python -m tests.support.forkprobe WHAT [ARG]``.

``exit N`` exits with N; ``raise`` dies of an uncaught exception; ``env NAME`` prints that
variable; ``sleep`` prints its pid and waits to be killed; ``django`` prints the database name.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> None:
    what = argv[1]
    if what == "exit":
        sys.exit(int(argv[2]))
    if what == "raise":
        raise RuntimeError("the probe raised")
    if what == "env":
        print(f"{argv[2]}={os.environ.get(argv[2], '<unset>')}")
    elif what == "sleep":
        print(f"sleeping pid={os.getpid()}", flush=True)
        time.sleep(600)
    elif what == "django":
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute("SELECT current_database()")
            print(f"database={cur.fetchone()[0]}")


if __name__ == "__main__":
    main(sys.argv)
