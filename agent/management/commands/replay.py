"""``python manage.py replay RUN_ID``: a run's steps, what the model saw, divergence, forks.

    replay RUN_ID                         the steps, one per line
    replay RUN_ID --at N [--json]         what the model saw before step N (no model is called)
    replay RUN_ID --diverge [--system-prompt FILE]
                                          re-ask the run's provider turn by turn; exit 1 if a
                                          decision differs, 0 if none does (nothing is executed)
    replay RUN_ID --fork-from N --as EMAIL [--wait]
                                          start a fork of the run from step N; print its id

Bad input exits non-zero with one sentence.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agent import replay
from agent.cli import print_outcome, run_by_id, user_by_email, wait_for_rest
from agent.models import Run, Step, StepKind
from agent.runs import RunRefused
from approvals.models import Channel
from deskhand.desk.permissions import NotAllowed, NotVisible


def _one_line(text: Any, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _call(block: dict[str, Any], width: int = 80) -> str:
    args = ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (block.get("input") or {}).items()
    )
    return _one_line(f"{block.get('name')}({args})", width)


def _summary(step: Step) -> str:
    r = step.result if isinstance(step.result, dict) else {}
    if step.kind == StepKind.MODEL:
        calls = replay.tool_uses(r.get("content") or [])
        text = " ".join(
            b.get("text", "") for b in r.get("content") or [] if b.get("type") == "text"
        )
        head = "; ".join(_call(c, 70) for c in calls) or _one_line(text, 100) or "(no text)"
        return f"[{r.get('stop_reason', '?')}] {head}"
    if step.kind == StepKind.TOOL:
        ledger = f" (ledger {r['ledger_key']})" if step.replayed and r.get("ledger_key") else ""
        return _one_line(r.get("text", ""), 100) + ledger
    if step.kind == StepKind.APPROVAL:
        event = r.get("event", "?")
        if event == "requested":
            return _one_line(f"requested: {r.get('preview', '')}", 100)
        who = f" by {r['decided_by']}" if r.get("decided_by") else ""
        why = f" — reason: {r['reason']}" if r.get("reason") else ""
        detail = f" — {r['detail']}" if r.get("detail") else ""
        return _one_line(f"{event}{who}{why}{detail}", 100)
    if step.kind == StepKind.NOTE:
        return _one_line(
            "; ".join(f"{n.get('author')}: {n.get('body')}" for n in r.get("notes", [])), 100
        )
    if step.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR):
        reason = r.get("stop_reason") or ""
        return _one_line(
            f"{r.get('status', step.kind)}"
            + (f" ({reason})" if reason else "")
            + (f" — {r['detail']}" if r.get("detail") else ""),
            100,
        )
    if step.kind == StepKind.UNDO:
        return _one_line(f"undid step {r.get('undid_seq')}: {r.get('text', '')}", 100)
    return _one_line(json.dumps(r, ensure_ascii=False), 100)


def _differing(a: list[str], b: list[str], width: int = 120) -> tuple[str, str]:
    """Both decision lists on one line each, cut around where they first differ."""
    left, right = ", ".join(a), ", ".join(b)
    i = next(
        (k for k, (x, y) in enumerate(zip(left, right, strict=False)) if x != y),
        min(len(left), len(right)),
    )
    if max(len(left), len(right)) <= width or i < width - 30:
        return _one_line(left, width), _one_line(right, width)
    start = i - 40
    return "…" + _one_line(left[start:], width), "…" + _one_line(right[start:], width)


def _row(seq: str, kind: str, tool: str, ok: str, replayed: str, summary: str) -> str:
    return f"{seq:>4}  {kind:<8}  {tool:<20}  {ok:<6}  {replayed:<8}  {summary}"


class Command(BaseCommand):
    help = "Show a run's steps, what the model saw before step N, where a changed prompt diverges, or fork it."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        parser = super().create_parser(prog_name, subcommand, **kwargs)

        def one_sentence(message: str) -> None:
            # argparse would print the whole usage block; one sentence says what was wrong.
            if not parser.called_from_command_line:
                raise CommandError(f"{message}.")
            self.stderr.write(f"CommandError: {message} (see --help).")
            sys.exit(2)

        parser.error = one_sentence  # type: ignore[method-assign]
        return parser

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--at", type=int, metavar="N", help="print what the model saw before step N"
        )
        mode.add_argument(
            "--diverge", action="store_true", help="replay against a (changed) system prompt"
        )
        mode.add_argument(
            "--fork-from", type=int, metavar="N", help="start a fork of the run from step N"
        )
        parser.add_argument("--json", action="store_true", help="with --at: one JSON object")
        parser.add_argument(
            "--system-prompt",
            metavar="FILE",
            help="with --diverge: the system prompt to replay under",
        )
        parser.add_argument("--as", dest="email", help="with --fork-from: who starts the fork")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="with --fork-from: wait until it ends or waits for a person",
        )
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["system_prompt"] and not opts["diverge"]:
            raise CommandError("--system-prompt only applies to --diverge.")
        if (opts["email"] or opts["wait"]) and opts["fork_from"] is None:
            raise CommandError("--as and --wait only apply to --fork-from.")
        if opts["json"] and opts["at"] is None:
            raise CommandError("--json only applies to --at.")
        run = run_by_id(opts["run_id"])
        if opts["fork_from"] is not None:
            return self._fork(run, opts)
        with transaction.atomic():
            timeline = replay.load(run)
        if opts["at"] is not None:
            return self._at(timeline, opts["at"], opts["json"])
        if opts["diverge"]:
            return self._diverge(timeline, opts["system_prompt"])
        return self._show(timeline)

    # --- the step list -----------------------------------------------------------

    def _show(self, tl: replay.Timeline) -> None:
        run = tl.run
        w = self.stdout.write
        w(
            f"run {run.id}  ticket {run.ticket.reference}  {run.status}"
            + (f" ({run.stop_reason})" if run.stop_reason else "")
            + f"  · {run.provider}/{run.model}"
        )
        if run.forked_from_id:
            w(
                f"forked from run {run.forked_from_id} at step {run.fork_step}; steps before {run.fork_step} are that run's (marked ^)"
            )
        w(_row("seq", "kind", "tool", "ok", "replayed", "result"))
        answers: dict[int, list[replay.Settled]] = {}
        for s in replay.ledger_answers(tl):
            answers.setdefault(s.after_seq, []).append(s)
        for step in tl.steps:
            inherited = str(step.run_id) != str(run.pk)
            seq = f"{'^' if inherited else ''}{step.seq}"
            w(
                _row(
                    seq,
                    step.kind,
                    step.tool or "-",
                    "ok" if step.ok else "FAILED",
                    "replayed" if step.replayed else "-",
                    _summary(step),
                )
            )
            for s in answers.get(step.seq, []):
                key = f"{tl.root_id}:{s.call.get('id')}"
                if s.source == "ledger":
                    fact = tl.ledger[key]
                    text = (
                        f"answered from the ledger ({key}), no step row: {_one_line(fact.text, 60)}"
                    )
                    w(
                        _row(
                            "·",
                            "ledger",
                            s.call.get("name", "?"),
                            "ok" if fact.ok else "FAILED",
                            "ledger",
                            text,
                        )
                    )
                else:
                    w(
                        _row(
                            "·",
                            "ledger",
                            s.call.get("name", "?"),
                            "FAILED",
                            "-",
                            f"refused: ledger key {key} holds different arguments",
                        )
                    )
        if not tl.steps:
            w("  (no steps yet)")
        w(f"see what the model saw before step N: python manage.py replay {run.id} --at N")

    # --- --at N --------------------------------------------------------------------

    def _at(self, tl: replay.Timeline, n: int, as_json: bool) -> None:
        if n < 1 or n > tl.last_seq + 1:
            span = f"1 to {tl.last_seq + 1}" if tl.last_seq else "1"
            raise CommandError(f"run {tl.run.id} has no step {n}; --at takes {span}.")
        view = replay.view_at(tl, n)
        if as_json:
            self.stdout.write(json.dumps(view.as_dict(), ensure_ascii=False, sort_keys=True))
            return
        w = self.stdout.write
        what = (
            f"step {n} ({view.step.tool or view.step.kind})"
            if view.step
            else f"step {n} (after the last step)"
        )
        w(f"what the model saw before {what} of run {tl.run.id}")
        w("reconstructed from the step log — no model was called")
        if view.exact:
            w(f"these are the {len(view.messages)} messages sent at step {n}")
        elif view.partial:
            w(
                "the last user turn holds this turn's results so far; the next model call gets the rest too"
            )
        w(
            "system: the current system prompt (agent/prompts.py) with this run's fence token; print it with --json"
        )
        for warning in view.warnings:
            w(f"warning: {warning}")
        for message in view.messages:
            w(f"── {message['role']} ──")
            for block in (
                message["content"]
                if isinstance(message["content"], list)
                else [{"type": "text", "text": message["content"]}]
            ):
                kind = block.get("type")
                if kind == "text":
                    w(block.get("text", ""))
                elif kind == "tool_use":
                    w(
                        f"[tool_use {block.get('id')}] {block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False, sort_keys=True)}"
                    )
                elif kind == "tool_result":
                    w(
                        f"[tool_result {block.get('tool_use_id')}]"
                        + (" (error)" if block.get("is_error") else "")
                    )
                    w(str(block.get("content", "")))
                elif kind == "thinking":
                    w("[thinking]")
                else:
                    w(f"[{kind}] {json.dumps(block, ensure_ascii=False)}")

    # --- --diverge ---------------------------------------------------------------

    def _diverge(self, tl: replay.Timeline, prompt_file: str | None) -> None:
        from agent.providers import provider_for_run

        if prompt_file:
            path = Path(prompt_file)
            if not path.is_file():
                raise CommandError(f"no system prompt file {prompt_file!r}.")
            try:
                system = replay.custom_system_prompt(path.read_text(), tl.token)
            except UnicodeDecodeError:
                raise CommandError(f"{prompt_file!r} is not a UTF-8 text file.") from None
            source = f"the system prompt in {prompt_file}"
        else:
            system = replay.system_prompt(tl.token)
            source = "the current system prompt"
        if not any(s.kind == StepKind.MODEL for s in tl.steps):
            raise CommandError(f"run {tl.run.id} made no model calls; there is nothing to replay.")
        try:
            provider = provider_for_run(str(tl.run.pk), tl.run.provider, tl.run.model)
        except ValueError as exc:
            raise CommandError(f"{exc}.") from None
        w = self.stdout.write
        w(
            f"replaying run {tl.run.id} against {source} with {provider.name}/{provider.model} — nothing is executed or written"
        )
        try:
            result = replay.diverge(tl, provider, system)
        except Exception as exc:  # a provider failing mid-replay is reported, not a traceback
            raise CommandError(
                f"the provider failed during the replay: {type(exc).__name__}: {_one_line(exc, 200)}."
            ) from None
        w(
            f"model calls made for the replay: {result.matched + (1 if result.diverged else 0)}, {result.input_tokens + result.output_tokens} tokens, {result.cost_micros} micro-USD (not charged to any run)"
        )
        if not result.diverged:
            w(f"no divergence — all {result.total} decision(s) matched")
            return
        w(
            f"diverged at step {result.seq}: {result.matched} of {result.total} decisions matched first"
        )
        before, now = _differing(result.original, result.now)
        w("  originally: " + (before or "(no tool call: it finished)"))
        w("  now:        " + (now or "(no tool call: it would finish)"))
        if result.now_text:
            w("  now says:   " + _one_line(result.now_text, 160))
        w(
            "the replay stops here: there is no recorded observation for a call the original run never made."
        )
        self.stdout.flush()
        sys.exit(1)

    # --- --fork-from N -------------------------------------------------------------

    def _fork(self, run: Run, opts: dict[str, Any]) -> None:
        from agent.fork import fork_run

        if not opts["email"]:
            raise CommandError("--fork-from needs --as EMAIL (who starts the fork).")
        user = user_by_email(opts["email"])
        try:
            fork = fork_run(run=run, seq=opts["fork_from"], user=user, channel=Channel.CLI)
        except NotVisible:
            raise CommandError(f"no run {opts['run_id']}.") from None
        except (RunRefused, NotAllowed) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(fork.id))
        if fork.status == "failed" and fork.stop_reason == "enqueue_failed":
            raise CommandError(f"the fork {fork.id} could not be started: {fork.stop_detail}")
        if opts["wait"]:
            fork = wait_for_rest(fork, opts["timeout"])
            print_outcome(self, fork, False)
