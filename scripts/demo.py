"""`make demo`: the product on one machine — embedded Postgres, a worker, the web console.

Migrates, seeds the demo merchants (once), starts `manage.py worker` and
uvicorn, prints where to go and how to sign in, and on Ctrl-C stops all of
it, including the embedded Postgres when this script started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PORT = int(os.environ.get("DESKHAND_PORT", "8000"))


def manage(*args: str) -> None:
    subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True)


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    sys.path.insert(0, str(ROOT))
    from deskhand import embedded_pg

    embedded = not os.environ.get("DATABASE_URL")
    started_pg = embedded and not embedded_pg.is_running()
    if embedded:
        print(
            f"Using the embedded Postgres under {embedded_pg.pgdata_dir()} (set DATABASE_URL to use your own server)."
        )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        manage("migrate", "--noinput", "-v", "0")
        manage("seed")
        procs.append(
            subprocess.Popen(
                [
                    PY,
                    "manage.py",
                    "worker",
                    "--executor-id",
                    os.environ.get("DESKHAND_EXECUTOR_ID", "demo-worker-1"),
                ],
                cwd=ROOT,
                # The worker keeps its connections: each step then skips a connect.
                env={
                    **os.environ,
                    "DESKHAND_CONN_MAX_AGE": os.environ.get("DESKHAND_CONN_MAX_AGE", "60"),
                },
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    PY,
                    "-m",
                    "uvicorn",
                    "deskhand.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(PORT),
                    "--log-level",
                    "warning",
                ],
                cwd=ROOT,
            )
        )
        time.sleep(2)
        keyless = not os.environ.get("ANTHROPIC_API_KEY")
        print(
            "\n"
            f"  Deskhand is running:   http://127.0.0.1:{PORT}/\n"
            "  Sign in as            owner@northwind.test / demo-password-123\n"
            "                        (also agent@…, viewer@northwind.test; owner@lumen.test; admin: auditor@deskhand.test)\n"
            f"  Model                 {'scripted provider (no ANTHROPIC_API_KEY set)' if keyless else 'Anthropic'}\n"
            "  CLI                   .venv/bin/python manage.py run_ticket NW-1 --wait\n"
            "  Stop                  Ctrl-C\n"
        )
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        print("a process exited; stopping the demo", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping…")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        if started_pg:
            embedded_pg.stop()
            print("embedded Postgres stopped")


if __name__ == "__main__":
    sys.exit(main())
