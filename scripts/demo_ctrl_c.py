#!/usr/bin/env python3
"""Press Ctrl-C on `make demo` in a real terminal, N times: each must exit 0 and leave nothing.

``python scripts/demo_ctrl_c.py --times 5`` runs ``make demo`` in a pseudo-terminal
(so the Ctrl-C is the terminal's own: a ``\\x03`` typed into it, delivered as SIGINT
to whatever group holds the foreground), waits until the console answers, types
Ctrl-C, and checks that make exits 0 and that no process of the demo's session
(worker, web server, the embedded Postgres it started) is left. Each run gets a
fresh data folder (its own embedded Postgres) and a free port, so it neither needs
nor disturbs a demo or a test database already running. Prints one JSON line per
run; exits non-zero if any run failed. tests/edge/test_demo_stop.py runs it once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_members(sid: int) -> list[str]:
    """``pid command`` of every live process in session ``sid`` (zombies excluded)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found.append(f"{proc.name} {cmdline}")
    return found


def postgres_on(data_dir: Path) -> list[str]:
    """``pid command`` of live postgres processes whose command line names ``data_dir``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if str(data_dir) in cmdline and "postgres" in cmdline:
            found.append(f"{proc.name} {cmdline}")
    return found


class Terminal:
    def __init__(self, fd: int) -> None:
        self.fd, self.output = fd, b""

    def read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False once the terminal is closed."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        self.output += chunk
        return bool(chunk)

    def text(self) -> str:
        return self.output.decode(errors="replace")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def one_run(timeout: float) -> dict[str, object]:
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="dh-demo-", dir="/tmp"))  # short: a socket lives there
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DESKHAND_DATA_DIR=str(data_dir),
        DESKHAND_PORT=str(port),
        DESKHAND_MAIL_PORT=str(free_port()),  # the demo's SMTP receiver, off any running demo's
        DESKHAND_EXECUTOR_ID=f"demo-check-{os.getpid()}-{port}",
        PYTHONUNBUFFERED="1",
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own with the pty as its terminal
        os.chdir(ROOT)
        # A shell's background job starts with SIGINT ignored, and an ignored signal stays
        # ignored across exec: Python would then install no Ctrl-C handler and the typed
        # Ctrl-C would test nothing. A terminal user's demo starts with the default.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execvpe("make", ["make", "--no-print-directory", "demo"], env)
    term = Terminal(fd)
    result: dict[str, object] = {"port": port}
    try:
        deadline = time.monotonic() + timeout
        while not (
            b"Deskhand is running" in term.output
            and answers(f"http://127.0.0.1:{port}/accounts/login/")
        ):
            if time.monotonic() > deadline or not term.read(0.5):
                result.update(ok=False, why="the demo did not come up", output=term.text()[-3000:])
                return result
        members = session_members(pid) + postgres_on(data_dir)
        started = time.monotonic()
        os.write(fd, b"\x03")  # Ctrl-C, typed
        status = None
        while status is None and time.monotonic() - started < 60:
            term.read(0.2)
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
        until = time.monotonic() + 5
        while term.read(0.1) and time.monotonic() < until:  # the last lines
            pass
        left: list[str] = []
        for _ in range(50):  # a process that is exiting gets a moment
            # The embedded Postgres daemonizes out of the session: looked for by its folder.
            left = session_members(pid) + postgres_on(data_dir)
            if not left:
                break
            time.sleep(0.1)
        result.update(
            exit=status,
            stop_seconds=round(time.monotonic() - started, 1),
            processes_before=len(members),
            left=left,
            ok=status == 0 and not left,
        )
        if not result["ok"]:
            result["output"] = term.text()[-3000:]
        return result
    finally:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # only if something went wrong: the session's group
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        os.close(fd)
        if (data_dir / "pgdata" / "postmaster.pid").exists():  # a failed run's Postgres
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from deskhand.infra import embedded_pg; embedded_pg.stop()",
                ],
                cwd=ROOT,
                env=env,
                timeout=60,
                check=False,
            )
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument(
        "--timeout", type=float, default=240.0, help="seconds for the demo to come up"
    )
    opts = parser.parse_args()
    failed = 0
    for i in range(opts.times):
        result = one_run(opts.timeout)
        failed += not result["ok"]
        print(json.dumps({"run": i + 1, **result}), flush=True)
    print(json.dumps({"runs": opts.times, "exited_0_and_clean": opts.times - failed}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
