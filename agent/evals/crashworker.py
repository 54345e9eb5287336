"""Test-only launcher: a real worker that SIGKILLs itself at a named point, with a chosen model.

Usage: ``python -m agent.evals.crashworker EXECUTOR_ID SPEC PROVIDER``

``SPEC`` is a comma-separated list of ``point:target[:nth]`` (see ``agent.faults``):
``before_step:model:3``, ``after_step:tool.issue_refund``, ``after_effect:issue_refund``…
``PROVIDER`` names a script in ``agent.evals.scripts`` (``policy``, ``nw3-asks``…); the
crash sweep needs NW-3's denial path, which the policy reader never asks for.

Nothing in the product reads a flag, a setting or an environment variable for
this: only this launcher, run by the crash sweep, installs crash points and the
model override, in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.db import connections

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = ROOT / ".deskhand" / "crash-sweep"


def install(spec: str) -> None:
    from agent import faults

    for item in filter(None, spec.split(",")):
        point, target, *rest = item.split(":")
        faults.kill_at(point, target, int(rest[0]) if rest else 1)


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from agent.evals import scripts
    from agent.providers import install_override

    executor_id, spec, provider = (
        argv[1],
        argv[2] if len(argv) > 2 else "",
        argv[3] if len(argv) > 3 else "policy",
    )
    install(spec)
    install_override("*", scripts.provider(provider))
    call_command("worker", executor_id=executor_id, reconcile_every=1.0)


def database_url() -> str:
    sd = connections["default"].settings_dict
    host = sd.get("HOST") or "127.0.0.1"
    auth = quote(sd.get("USER") or "postgres", safe="")
    if sd.get("PASSWORD"):
        auth += ":" + quote(sd["PASSWORD"], safe="")
    port = f":{sd['PORT']}" if sd.get("PORT") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{sd['NAME']}"


class Worker:
    """``python -m agent.evals.crashworker``: a real ``manage.py worker`` that may be told to die."""

    def __init__(self, executor_id: str, provider: str) -> None:
        self.executor_id = executor_id
        self.provider = provider
        self.proc: subprocess.Popen[str] | None = None
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{executor_id}.log"

    def start(self, spec: str = "") -> Worker:
        env = dict(
            os.environ,
            DATABASE_URL=database_url(),
            DESKHAND_QUEUE_POLL_SEC="0.05",
            PYTHONUNBUFFERED="1",
        )
        with self.log_path.open("a") as log:
            log.write(f"--- start spec={spec!r}\n")
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agent.evals.crashworker",
                    self.executor_id,
                    spec,
                    self.provider,
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        end = time.monotonic() + 60
        while time.monotonic() < end:
            text = self.log_path.read_text()
            if text.rsplit("--- start", 1)[-1].find(f"worker {self.executor_id} ready") != -1:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(
            f"worker {self.executor_id} did not start:\n{self.log_path.read_text()[-3000:]}"
        )

    @property
    def killed(self) -> bool:
        return self.proc is not None and self.proc.poll() == -9

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


if __name__ == "__main__":
    main(sys.argv)
