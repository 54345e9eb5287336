"""Bad input to ``replay``: a non-zero exit and one sentence, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from agent.models import Run, Step
from agent.run.services import run_create
from deskhand.domain.desk.models import Ticket
from tests.durability.helpers import user
from tests.fixtures.dbos import ROOT, test_database_url
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)


def finished_run_without_history() -> Run:
    """A run whose step log exists but whose DBOS history was cleared (seed --reset does that)."""
    run = run_create(ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test"))
    Step.objects.create(
        run=run,
        seq=1,
        function_id=5,
        kind="model",
        result={"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"},
        arguments={"message_count": 1},
    )
    Step.objects.create(
        run=run,
        seq=2,
        function_id=6,
        kind="final",
        result={"status": "succeeded", "stop_reason": "end_turn"},
    )
    Run.objects.filter(pk=run.pk).update(status="succeeded", stop_reason="end_turn", steps=2)
    run.refresh_from_db()
    return run


def test_bad_input_is_one_sentence_and_a_non_zero_exit(tseeded, tmp_path):
    run = finished_run_without_history()
    rid = str(run.id)
    cases = [
        (["not-a-run"], "'not-a-run' is not a run id (expected a UUID)."),
        ([str(uuid.uuid4())], "no run "),
        ([rid, "--at", "0"], f"run {rid} has no step 0; --at takes 1 to 3."),
        ([rid, "--at", "4"], f"run {rid} has no step 4; --at takes 1 to 3."),
        ([rid, "--json"], "--json only applies to --at, --diverge and --corpus."),
        (
            [rid, "--system-prompt", "x.txt"],
            "--system-prompt only applies to --diverge and --corpus.",
        ),
        (
            [rid, "--diverge", "--system-prompt", str(tmp_path / "missing.txt")],
            "no system prompt file",
        ),
        ([rid, "--as", "owner@northwind.test"], "--as and --wait only apply to --fork-from."),
        (
            [rid, "--fork-from", "1", "--as", "nobody@example.com"],
            "no user with email 'nobody@example.com'.",
        ),
        ([rid, "--fork-from", "1", "--as", "owner@northwind.test"], "has no DBOS history"),
    ]
    for args, words in cases:
        code, out = replay_cmd(*args)
        assert code != 0, (args, out)
        assert words in out and "\n" not in out.strip(), (args, out)
    assert not Run.objects.filter(forked_from=run).exists()  # a refused fork leaves no row

    # What the model saw is shown even without DBOS history: the step log is enough.
    code, out = replay_cmd(rid, "--at", "2")
    assert code == 0 and "these are" not in out and "── assistant ──" in out


def test_the_real_command_prints_a_sentence_not_a_traceback(tseeded):
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    for args in ([str(uuid.uuid4()), "--at", "x"],):  # argparse's own error path, made one line
        proc = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "replay", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_diverge_and_corpus_refuse_bad_input_in_one_sentence(tseeded, settings):
    run = finished_run_without_history()
    rid = str(run.id)
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"  # never called: every case is refused first
    cases = [
        ([rid, "--diverge", "--provider", "openai"], "unknown provider 'openai'; expected"),
        (["--corpus", "--provider", "gpt"], "unknown provider 'gpt'; expected"),
        (
            ["--corpus", "--provider", "anthropic", "--model", "claude-mythos-preview"],
            "Model 'claude-mythos-preview' cannot be used because its price is unknown",
        ),
        (
            [rid, "--diverge", "--provider", "anthropic", "--model", "gpt-9"],
            "Model 'gpt-9' cannot be used because its price is unknown",
        ),
        (["--corpus", "--model", "claude-sonnet-4-6"], "--model applies only with --provider"),
        (["--corpus", "--merchant", "nosuch"], "no merchant 'nosuch'."),
        ([rid, "--corpus"], "--corpus replays many runs and takes no run id."),
        ([], "give a run id, or --corpus to replay many runs."),
        (
            ["--corpus", "--provider", "anthropic"],
            "a corpus against a real provider (anthropic) needs --max-spend-usd.",
        ),
        (["--corpus", "--max-spend-usd", "-1"], "--max-spend-usd takes an amount of dollars"),
        (["--corpus", "--max-spend-usd", "lots"], "--max-spend-usd takes an amount of dollars"),
        (["--corpus", "--limit", "0"], "--limit takes a number of runs of at least 1."),
        (["--corpus", "--since", "0"], "--since takes a number of days of at least 1."),
        ([rid, "--merchant", "northwind"], "--merchant only applies to --corpus."),
        ([rid, "--provider", "anthropic"], "--provider only applies to --diverge and --corpus."),
        ([rid, "--at", "1", "--max-spend-usd", "1"], "--max-spend-usd only applies to"),
    ]
    for args, words in cases:
        code, out = replay_cmd(*args)
        assert code != 0, (args, out)
        assert words in out and "\n" not in out.strip(), (args, out)

    settings.ANTHROPIC_API_KEY = ""
    for args in (
        [rid, "--diverge", "--provider", "anthropic"],
        ["--corpus", "--provider", "anthropic", "--max-spend-usd", "1"],
    ):
        code, out = replay_cmd(*args)
        assert code != 0
        assert out == "--provider anthropic needs ANTHROPIC_API_KEY to be set.", out


def test_a_corpus_error_with_json_is_one_object_on_stdout(tseeded):
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "replay",
            "--corpus",
            "--merchant",
            "nosuch",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert json.loads(proc.stdout) == {"error": "no merchant 'nosuch'.", "code": "not_found"}
    assert "Traceback" not in proc.stderr
