"""``python manage.py replay``: a run's steps, what the model saw, divergence, forks.

    replay RUN_ID                         the steps, one per line
    replay RUN_ID --at N [--json]         what the model saw before step N (no model is called):
                                          the article versions read before it (title, version,
                                          console link, as recorded: not as they are now), then
                                          the system prompt and tools that step was recorded
                                          with (its prompt version), and the messages — for a
                                          model step exactly what it was sent, for any other
                                          step that conversation as far as the loop had built it
                                          (agent.conversation). --json prints one object {system,
                                          tools, messages, prompt_sha256, prompt_version,
                                          prompt_current, knowledge_read}
    replay RUN_ID --diverge [--system-prompt FILE] [--provider P] [--model M]
                  [--max-spend-usd X] [--json]
                                          re-ask a provider turn by turn and compare decisions
                                          (tools and decisive arguments; other wording is a soft
                                          difference); exit 1 if one differs, 0 if none does
    replay --corpus [--merchant SLUG] [--since DAYS] [--limit N] [--system-prompt FILE]
                    [--provider P] [--model M] [--max-spend-usd X] [--json]
                                          the same over many finished runs: a table (or one
                                          object); --max-spend-usd is required with a real
                                          provider (anthropic)
    replay RUN_ID --fork-from N --as EMAIL [--wait]
                                          start a fork of the run from step N; print its id

Nothing but --fork-from writes anything. Bad input exits non-zero with one sentence (with
--json: one {"error", "code"} object on stdout).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

from agent.management import divergence
from agent.management.helpers import print_outcome, run_by_id, user_by_email, wait_for_rest
from agent.models import Run, Step, payloads
from agent.models.payloads import StepKind
from agent.privacy.redaction import replay_refusal
from agent.replay import compat, rebuild, timeline
from agent.replay.fork import fork_run
from agent.replay.knowledge import knowledge_read
from agent.run.services import RunRefused
from approvals.models import Channel
from deskhand.domain.cli import CliError, DeskhandCommand, UsageError
from deskhand.domain.desk.permissions import NotAllowed, NotVisible

_one_line = divergence.one_line


def _call(block: dict[str, Any], width: int = 80) -> str:
    args = ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (block.get("input") or {}).items()
    )
    return _one_line(f"{block.get('name')}({args})", width)


def _summary(step: Step) -> str:
    p = payloads.read(step)
    late = " (late: finished after the run was closed)" if p.late else ""
    return _one_line(_describe(step, p), 100 - len(late)) + late


def _describe(step: Step, p: payloads.StepPayload) -> str:
    if isinstance(p, payloads.ModelPayload):
        head = "; ".join(_call(c, 70) for c in p.calls) or _one_line(p.text, 100) or "(no text)"
        return f"[{p.stop_reason or '?'}] {head}"
    if isinstance(p, payloads.ToolPayload):
        ledger = f" (ledger {p.ledger_key})" if step.replayed and p.ledger_key else ""
        return _one_line(p.text, 100) + ledger
    if isinstance(p, payloads.ApprovalPayload):
        if p.event == "requested":
            return f"requested: {p.preview}"
        who = f" by {p.decided_by}" if p.decided_by else ""
        why = f" — reason: {p.reason}" if p.reason else ""
        detail = f" — {p.detail}" if p.detail else ""
        return f"{p.event or '?'}{who}{why}{detail}"
    if isinstance(p, payloads.NotePayload):
        return "; ".join(f"{n.author}: {n.body}" for n in p.notes)
    if isinstance(p, payloads.EndPayload):
        return (
            f"{p.status or step.kind}"
            + (f" ({p.stop_reason})" if p.stop_reason else "")
            + (f" — {p.detail}" if p.detail else "")
        )
    return f"undid step {p.undid_seq}: {p.text}"


def _row(seq: str, kind: str, tool: str, ok: str, replayed: str, summary: str) -> str:
    return f"{seq:>4}  {kind:<8}  {tool:<20}  {ok:<6}  {replayed:<8}  {summary}"


class Command(DeskhandCommand):
    help = "Show a run's steps, what the model saw before step N, where a changed prompt diverges, or fork it."
    not_done = "nothing was replayed or forked"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id", nargs="?")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--at", type=int, metavar="N", help="print what the model saw before step N"
        )
        mode.add_argument(
            "--diverge", action="store_true", help="replay against a (changed) system prompt"
        )
        mode.add_argument(
            "--corpus", action="store_true", help="--diverge over many finished runs (no run id)"
        )
        mode.add_argument(
            "--fork-from", type=int, metavar="N", help="start a fork of the run from step N"
        )
        parser.add_argument(
            "--json", action="store_true", help="with --at, --diverge, --corpus: one JSON object"
        )
        parser.add_argument(
            "--system-prompt",
            metavar="FILE",
            help="with --diverge, --corpus: the system prompt to replay under",
        )
        parser.add_argument("--provider", help="with --diverge, --corpus: anthropic or scripted")
        parser.add_argument("--model", help="with --provider anthropic: which model")
        parser.add_argument(
            "--max-spend-usd",
            metavar="X",
            help="with --diverge, --corpus: stop once the replay's model calls cost this much",
        )
        parser.add_argument("--merchant", metavar="SLUG", help="with --corpus: one merchant's runs")
        parser.add_argument(
            "--since", type=int, metavar="DAYS", help="with --corpus: runs from the last DAYS days"
        )
        parser.add_argument(
            "--limit", type=int, metavar="N", help="with --corpus: at most N runs (default 100)"
        )
        parser.add_argument("--as", dest="email", help="with --fork-from: who starts the fork")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="with --fork-from: wait until it ends or waits for a person",
        )
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        replaying = opts["diverge"] or opts["corpus"]
        for flag in ("system_prompt", "provider", "model", "max_spend_usd"):
            if opts[flag] is not None and not replaying:
                raise UsageError(
                    f"--{flag.replace('_', '-')} only applies to --diverge and --corpus."
                )
        for flag in ("merchant", "since", "limit"):
            if opts[flag] is not None and not opts["corpus"]:
                raise UsageError(f"--{flag} only applies to --corpus.")
        if (opts["email"] or opts["wait"]) and opts["fork_from"] is None:
            raise UsageError("--as and --wait only apply to --fork-from.")
        if opts["json"] and opts["at"] is None and not replaying:
            raise UsageError("--json only applies to --at, --diverge and --corpus.")
        if opts["corpus"]:
            if opts["run_id"]:
                raise UsageError("--corpus replays many runs and takes no run id.")
            return divergence.run_corpus(self, opts)
        if not opts["run_id"]:
            raise UsageError("give a run id, or --corpus to replay many runs.")
        run = run_by_id(opts["run_id"])
        refusal = replay_refusal(run)
        if refusal:
            raise CliError(refusal, code="refused")
        if opts["fork_from"] is not None:
            return self._fork(run, opts)
        with transaction.atomic():
            tl = timeline.load(run)
        if opts["at"] is not None:
            return self._at(tl, opts["at"], opts["json"])
        if opts["diverge"]:
            return divergence.diverge(self, tl, opts)
        return self._show(tl)

    # --- the step list -----------------------------------------------------------

    def _show(self, tl: timeline.Timeline) -> None:
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
        answers: dict[int, list[rebuild.Settled]] = {}
        for s in rebuild.ledger_answers(tl):
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
                    fact = tl.ledger_answer(s.call)
                    assert fact is not None  # a "ledger" answer is one the ledger gave
                    text = (
                        f"answered from the ledger (run {fact.run_id[:8]}), no step row: "
                        f"{_one_line(fact.text, 60)}"
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

    def _at(self, tl: timeline.Timeline, n: int, as_json: bool) -> None:
        if n < 1 or n > tl.last_seq + 1:
            span = f"1 to {tl.last_seq + 1}" if tl.last_seq else "1"
            raise CommandError(f"run {tl.run.id} has no step {n}; --at takes {span}.")
        view = rebuild.at(tl, n)
        # The article versions read before step N, as the step log recorded them.
        read = knowledge_read(tl.steps, before=n)
        if as_json:
            # Exactly one object: the system prompt and tools as sent, the messages, and whether
            # today's prompt and tools still hash to what that model step recorded; and the
            # knowledge read so far.
            shown = {**view.as_json(), "knowledge_read": [a.as_json() for a in read]}
            self.stdout.write(json.dumps(shown, ensure_ascii=False, sort_keys=True))
            for warning in view.warnings:  # the rebuild disagreeing with itself: stderr, not JSON
                self.stderr.write(f"warning: {warning}")
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
        for warning in view.warnings:
            w(f"warning: {warning}")
        w(f"── knowledge read before step {n} ({len(read)}) ──")
        for a in read:
            w(f'"{a.title}", version {a.version}, read at step {a.seq}: {a.path}')
        self._prompt(tl, view)
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

    def _prompt(self, tl: timeline.Timeline, view: rebuild.View) -> None:
        """The system prompt and tools that step was sent, and whether today's differ."""
        w = self.stdout.write
        if not any(s.kind == StepKind.MODEL for s in tl.steps):
            w("system: this run made no model call; today's system prompt and tools are shown")
        elif view.recorded:
            w(
                f"system: the recorded prompt version {(view.prompt_version or '')[:12]}, with this "
                "run's fence token"
            )
            w(
                "today's system prompt and tools are the same as these"
                if view.prompt_current
                else "today's system prompt or tools differ from these (the ones recorded)"
            )
        else:
            w(
                compat.UNVERSIONED_SYSTEM
                + (
                    ", and whether it is what the call was sent is not known"
                    if view.prompt_sha256 is None
                    else ", and it is what the call was sent"
                    if view.prompt_current
                    else ", and it is not what the call was sent"
                )
            )
        w("── system ──")
        w(view.system)
        names = ", ".join(str(t.get("name")) for t in view.tools)
        w(f"── tools ({len(view.tools)}; definitions with --json) ──")
        w(names)

    # --- --fork-from N -------------------------------------------------------------

    def _fork(self, run: Run, opts: dict[str, Any]) -> None:
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
