"""Worker processes forked from a warm parent: the SIGKILLs stay real, the imports are paid once.

Why: every crash test starts real ``manage.py worker`` processes and kills them. A cold
``python -m tests.devtools.crashworker`` spends about 1.8 s of CPU importing Django, DBOS,
the Anthropic SDK and the apps before it does anything, and the suite starts a few hundred
of them: on two cores that was over half of the suite's CPU (LESSONS #34).

How: one server process per pytest process and environment. It imports all of that once,
with that environment (the settings read it at import), and then forks one child per
request. A child is a real process with its own pid and its own connections (the server
never opens one); a test SIGKILLs it as before. The server reaps its children and reports
each exit status, as ``Popen.poll`` would give it, over the request's socket.

Set ``DESKHAND_TEST_FORKSERVER=0`` to start every worker cold, with ``subprocess``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Protocol, TextIO

ROOT = Path(__file__).resolve().parents[2]
# Changes every test and no import reads it: not part of a server's identity.
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


class Process(Protocol):
    """What the tests use of a worker process: ``subprocess.Popen`` has it, and so does ``Forked``."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...
    def terminate(self) -> None: ...


def start(module: str, args: list[str], env: dict[str, str], log_path: Path) -> Process:
    """``python -m MODULE ARGS…`` with ``env``, stdout and stderr appended to ``log_path``."""
    if os.environ.get("DESKHAND_TEST_FORKSERVER", "1") == "0":
        with log_path.open("a") as log:
            return subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
    return _server_for(env).spawn(module, args, env, log_path)


# ---------------------------------------------------------------- the client side

_servers: dict[tuple[tuple[str, str], ...], Server] = {}
_servers_lock = threading.Lock()
MAX_SERVERS = 6


def _identity(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE))


def _server_for(env: dict[str, str]) -> Server:
    key = _identity(env)
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive:
            if len(_servers) >= MAX_SERVERS:  # the oldest environment is the least likely again
                _servers.pop(next(iter(_servers))).close()
            server = _servers[key] = Server(env)
        return server


@atexit.register
def close_all() -> None:
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()


class Server:
    """One warm parent, started with ``env``; its stdin closing tells it to stop."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="dh-fork-")
        self.address = os.path.join(self._dir, "s")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.devtools.forkserver", self.address],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()  # "ready", or whatever went wrong, then EOF
        if first.strip() != "ready":
            rest = self.proc.stdout.read()
            self.proc.wait(10)
            raise RuntimeError(f"the test fork server did not start:\n{first}{rest}")
        # Anything the server prints later is read and dropped, so it can never block on a
        # full pipe (its children write to their own logs).
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, module: str, args: list[str], env: dict[str, str], log_path: Path) -> Forked:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.address)
        request = {"module": module, "args": args, "env": env, "log": str(log_path)}
        conn.sendall(json.dumps(request).encode() + b"\n")
        reader = conn.makefile("r")
        line = reader.readline()
        if not line.strip().isdigit():
            conn.close()
            raise RuntimeError(f"the test fork server refused to fork: {line!r}")
        return Forked(int(line), conn, reader)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        with contextlib.suppress(OSError):
            os.unlink(self.address)
            os.rmdir(self._dir)


class Forked:
    """A forked worker as a ``Popen`` look-alike: its exit status comes from the server."""

    def __init__(self, pid: int, conn: socket.socket, reader: TextIO) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._reader = reader

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        readable, _, _ = select.select([self._conn], [], [], timeout)
        if not readable:
            return None
        line = self._reader.readline()  # the server writes the whole status line at once
        # EOF without a status: the server died, and took the child down with it.
        self.returncode = int(line) if line.strip() else -signal.SIGKILL
        self._reader.close()
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid that may have been reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


# ---------------------------------------------------------------- the server side

PRELOAD = (
    "anthropic",
    "dbos",
    "psycopg",
    "deskhand.engine.management.commands.worker",
    "deskhand.engine.bootstrap",
    "deskhand.engine.takeover",
    "tests.devtools.crashworker",
    "tests.devtools.evals.scripts",
    "uvicorn",
    "deskhand.infra.edge.management.commands.web",
)


def serve(address: str) -> None:
    """Import once, then fork a child per request until stdin closes."""
    import importlib

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork copies no thread, but it copies their locks
        names = [t.name for t in threading.enumerate()]
        print(f"importing started threads {names}; forking from here is unsafe", flush=True)
        sys.exit(1)
    from django.db import connections

    assert all(c.connection is None for c in connections.all()), "the server opened a connection"

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    try:
        while True:
            for key, _ in sel.select():
                if key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif key.data == "child":
                    os.read(wake_r, 4096)
                elif key.data == "accept":
                    conn, _ = listener.accept()
                    _fork_one(conn, children, (listener, sel, wake_r, wake_w))
            _reap(children)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _fork_one(conn: socket.socket, children: dict[int, socket.socket], own: tuple) -> None:  # type: ignore[type-arg]
    try:
        request = json.loads(conn.makefile("r").readline())
    except ValueError as exc:
        conn.sendall(f"bad request: {exc}\n".encode())
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, [conn, *children.values()], own)  # never returns
    children[pid] = conn
    conn.sendall(f"{pid}\n".encode())


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _child(request: dict, conns: list[socket.socket], own: tuple) -> None:  # type: ignore[type-arg]
    """Become ``python -m MODULE ARGS…`` as far as the module can tell, then exit with its status."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Nothing of the server's stays open in the child: a socket held here would keep
        # another worker's status channel from closing when the server goes.
        listener, sel, wake_r, wake_w = own
        sel.close()
        listener.close()
        for c in conns:
            c.close()
        for fd in (wake_r, wake_w):
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(ROOT)
        sys.argv = [request["module"], *request["args"]]
        code = _run(request["module"])
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run(module: str) -> int:
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code: int = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # what the interpreter would print for an uncaught exception
        traceback.print_exc()
        code = 1
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    return code


if __name__ == "__main__":
    serve(sys.argv[1])
