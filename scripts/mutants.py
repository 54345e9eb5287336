#!/usr/bin/env python
"""``make mutants``: break the product on purpose and count the evals that notice.

Each mutation is a patch applied to *this* test process — the eval runner, its
in-process DBOS executor and the workflows it runs — and removed afterwards.
Nothing here is a flag, a setting or an environment variable the product reads;
a deployed worker cannot be put into any of these states.

Mutations:
  approval-check-removed  irreversible calls execute at once: no gate, no decision re-check
  fence-removed           tool results reach the model without a fence
  ledger-key-randomised   every execution claims a fresh ledger key
  loop-detection-off      the loop check is taken out of the bounds
  approved-call-ignored   the run performs the model's proposal, not the narrower call approved
  policy-count-off        a merchant rule approves past its daily count

Usage: scripts/mutants.py [--mutation NAME] [--invariant NAME]
Prints how many scenarios each mutation fails; exits 1 if a mutation goes unnoticed
(or removing the approval check fails fewer than ten scenarios).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from agent import loop  # noqa: E402
from agent.consent import policy as approval_policy  # noqa: E402
from agent.conversation import fence  # noqa: E402
from agent.ledger import effect as ledger_effect  # noqa: E402
from agent.models import Run  # noqa: E402
from agent.models.ledger import LedgerEntry  # noqa: E402
from agent.models.payloads import StepKind  # noqa: E402
from agent.record.execute import tool_context  # noqa: E402
from agent.record.steplog import log_step  # noqa: E402
from agent.run import bounds  # noqa: E402
from agent.tools import ToolError, args_hash, get_tool  # noqa: E402
from tests.devtools.evals.runner import (  # noqa: E402
    InProcessExecutor,
    Result,
    quiet_logs,
    run_all,
    scratch_database,
)
from tests.devtools.evals.scenarios import INVARIANTS, by_invariant  # noqa: E402


def _execute_without_approval(run_id: str, seq: int, call: dict[str, Any]) -> dict[str, Any]:
    """execute_irreversible with the approval taken out: ledger, handler, step row."""
    name, call_id, args = call["name"], call["id"], call["input"]
    tool = get_tool(name)
    run = Run.objects.select_related("ticket").get(pk=run_id)
    key = ledger_effect.ledger_key(run.root(), call_id, args_hash(name, args))
    with transaction.atomic():
        entry = LedgerEntry.objects.filter(key=key).first()
        if entry is None:
            entry = LedgerEntry.objects.create(
                key=key, merchant_id=run.merchant_id, root_run=run.root(), run=run, tool=name,
                tool_call_id=call_id, args_hash=args_hash(name, args), arguments=args, ok=True, result="",
            )  # fmt: skip
            try:
                with transaction.atomic():
                    ctx = tool_context(run, call_id, ledger_entry_id=entry.pk)
                    entry.result = tool.handler(ctx, args).text
            except ToolError as exc:
                entry.result, entry.ok = str(exc), False
            entry.save(update_fields=["result", "ok"])
        log_step(
            run_id=run_id, seq=seq, kind=StepKind.TOOL, tool=name, tool_call_id=call_id,
            risk=tool.risk.value, arguments=args, result={"text": entry.result}, ok=entry.ok,
        )  # fmt: skip
    return {"text": entry.result, "ok": entry.ok}


async def _gated_without_consent(self: loop.Loop, call: dict[str, Any]) -> dict[str, Any]:
    out = await self.rt.step(
        f"tool.{call['name']}", _execute_without_approval, self.run_id, self._next_seq(), call
    )
    return self._result(call, out["text"], out["ok"])


@contextlib.contextmanager
def approval_check_removed() -> Iterator[None]:
    with mock.patch.object(loop.Loop, "_gated", _gated_without_consent):
        yield


@contextlib.contextmanager
def fence_removed() -> Iterator[None]:
    with mock.patch.object(fence, "wrap", lambda text, token: text):
        yield


@contextlib.contextmanager
def ledger_key_randomised() -> Iterator[None]:
    with mock.patch.object(
        ledger_effect, "ledger_key", lambda root, call_id, digest: f"{root.pk}:{uuid.uuid4()}"
    ):
        yield


@contextlib.contextmanager
def loop_detection_off() -> Iterator[None]:
    with mock.patch.object(
        bounds, "CHECKS", tuple(c for c in bounds.CHECKS if c is not bounds.check_loop)
    ):
        yield


@contextlib.contextmanager
def approved_call_ignored() -> Iterator[None]:
    with mock.patch.object(ledger_effect, "approved_call", lambda approval, call: dict(call)):
        yield


@contextlib.contextmanager
def policy_count_off() -> Iterator[None]:
    real = approval_policy.policy_rules

    def lifted(policy: Any) -> list[approval_policy.Rule]:
        return [dataclasses.replace(r, max_per_day=10**6) for r in real(policy)]

    with mock.patch.object(approval_policy, "policy_rules", lifted):
        yield


MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "approval-check-removed": approval_check_removed,
    "fence-removed": fence_removed,
    "ledger-key-randomised": ledger_key_randomised,
    "loop-detection-off": loop_detection_off,
    "approved-call-ignored": approved_call_ignored,
    "policy-count-off": policy_count_off,
}
MINIMUM = {"approval-check-removed": 10}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mutation", choices=sorted(MUTATIONS), action="append")
    parser.add_argument("--invariant", choices=INVARIANTS)
    opts = parser.parse_args()
    scenarios = by_invariant(opts.invariant)
    names = opts.mutation or list(MUTATIONS)
    started = time.monotonic()
    outcome: dict[str, list[Result]] = {}

    def dot(i: int, result: Result) -> None:
        print("." if result.ok else "F", end="", flush=True)

    with quiet_logs(), scratch_database("deskhand_mutants") as db:
        print(f"{len(scenarios)} scenarios, {len(names)} mutations, scratch database {db}")
        executor = InProcessExecutor(f"mutants-{db.rsplit('_', 1)[-1]}", log_level="CRITICAL")
        executor.start()
        try:
            for name in ["baseline", *names]:
                print(f"{name:<24} ", end="", flush=True)
                with MUTATIONS[name]() if name in MUTATIONS else contextlib.nullcontext():
                    outcome[name] = run_all(scenarios, executor, dot)
                print()
        finally:
            executor.stop()

    print()
    print(f"{'mutation':<24} {'scenarios failed':>16}")
    print("-" * 41)
    ok = True
    for name, results in outcome.items():
        failed = [r.scenario.name for r in results if not r.ok]
        print(f"{name:<24} {len(failed):>7} of {len(results):<6}")
        for scenario in failed:
            print(f"    {scenario}")
        if name == "baseline":
            ok = ok and not failed
        elif len(failed) < MINIMUM.get(name, 1):
            ok = False
            print(f"    !! {name} should fail at least {MINIMUM.get(name, 1)} scenarios")
    print(f"({time.monotonic() - started:.0f}s)")
    print(
        "every mutation was caught" if ok else "a mutation went unnoticed (or the baseline failed)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
