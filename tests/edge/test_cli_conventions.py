"""CLI conventions: one-sentence errors, JSON errors with --json, any-case ticket references,
and a database that is down answered with a sentence (CLI) or a 503 page (web)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from django.core.management import call_command, get_commands, load_command_class

from deskhand.domain.cli import DeskhandCommand
from tests.console.conftest import client_for, fake_dbos, free_port  # noqa: F401
from tests.fixtures.dbos import ROOT

OURS = ("agent", "approvals", "deskhand.domain.desk", "deskhand.engine")
RUN = "00000000-0000-0000-0000-000000000000"
OWNER = "owner@northwind.test"


def our_commands() -> list[str]:
    return sorted(name for name, app in get_commands().items() if app in OURS)


def cli(*argv: str) -> tuple[int, str, str]:
    """``manage.py <argv>`` through the real argv path, in-process: (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    command = load_command_class(get_commands()[argv[0]], argv[0])
    command.stdout._out = out  # type: ignore[attr-defined]
    command.stderr._out = err  # type: ignore[attr-defined]
    code = 0
    try:
        command.run_from_argv(["manage.py", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_every_command_of_ours_keeps_the_conventions():
    names = our_commands()
    assert {"run_ticket", "decide", "cancel", "steer", "replay", "approvals", "seed"} <= set(names)
    for name in names:
        assert isinstance(load_command_class(get_commands()[name], name), DeskhandCommand), name


@pytest.mark.parametrize("name", our_commands())
def test_a_usage_error_is_one_sentence_or_one_json_object(name):
    # A missing argument or an unknown option: argparse's complaint, as one sentence.
    code, out, err = cli(name, "--no-such-option")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("CommandError: "), err
    assert err.endswith(" (see --help).\n") and "usage:" not in err, err
    assert "--no-such-option" in err or "arguments are required" in err, err

    code, out, err = cli(name, "--no-such-option", "--json")
    assert code == 2 and err == ""
    assert out.count("\n") == 1
    body = json.loads(out)
    assert body["code"] == "usage" and body["error"] == err_sentence(body["error"])


def err_sentence(text: str) -> str:
    assert text.endswith(" (see --help).") and "\n" not in text
    return text


@pytest.mark.parametrize(
    ("argv", "error", "slug"),
    [
        (["run_ticket", "NW-99", "--json"], "no ticket 'NW-99'.", "not_found"),
        (
            ["run_ticket", "NW-1", "--as", "nobody@x.test", "--json"],
            "no user with email",
            "not_found",
        ),
        (
            ["run_ticket", "NW-1", "--as", "owner@lumen.test", "--json"],
            "has no role",
            "not_allowed",
        ),
        (["cancel", "nope", "--as", OWNER, "--json"], "'nope' is not a run id", "invalid"),
        (["cancel", RUN, "--as", OWNER, "--json"], f"no run {RUN}.", "not_found"),
        (["decide", RUN, "approve", "--as", OWNER, "--json"], f"no approval {RUN}.", "not_found"),
        (["decide", RUN, "maybe", "--as", OWNER, "--json"], "invalid choice: 'maybe'", "usage"),
        (["steer", RUN, "hi", "--as", OWNER, "--json"], f"no run {RUN}.", "not_found"),
        (["approvals", "--merchant", "nowhere", "--json"], "no merchant 'nowhere'.", "not_found"),
        (["approvals", "--limit", "0", "--json"], "--limit must be at least 1.", "usage"),
        (["replay", "nope", "--at", "1", "--json"], "'nope' is not a run id", "invalid"),
    ],
)
def test_with_json_an_error_is_one_object_on_stdout_and_a_non_zero_exit(seeded, argv, error, slug):
    code, out, err = cli(*argv)
    assert code != 0 and err == ""
    assert out.count("\n") == 1, out
    body = json.loads(out)
    assert set(body) == {"error", "code"} and body["code"] == slug
    assert error in body["error"] and body["error"].endswith(".")


def test_without_json_the_same_error_is_one_sentence_on_stderr(seeded):
    code, out, err = cli("run_ticket", "NW-99")
    assert (code, out, err) == (1, "", "CommandError: no ticket 'NW-99'.\n")


def test_ticket_references_are_case_insensitive_in_the_cli(seeded, fake_dbos, capsys):  # noqa: F811
    call_command("run_ticket", "nw-1", "--json")
    outcome = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert outcome["ticket"] == "NW-1"
    assert [kind for kind, _ in fake_dbos.calls] == ["enqueue"]


def test_ticket_references_are_case_insensitive_in_the_console(seeded):
    page = client_for(OWNER).get("/tickets/nw-1/")
    assert page.status_code == 200 and "NW-1" in page.content.decode()
    assert client_for(OWNER).get("/tickets/lu-1/").status_code == 404  # still scoped to a merchant


def run_outage_probe(database_url: str, data_dir: str | None = None) -> list[dict[str, object]]:
    """tests/edge/outage_probe.py in its own ``manage.py shell``, on ``database_url``."""
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env.pop("ANTHROPIC_API_KEY", None)  # provider_check then says so, in one sentence
    if data_dir:
        env["DESKHAND_DATA_DIR"] = data_dir
    probe = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "--verbosity=0",
            "-c",
            "from tests.edge.outage_probe import main; main()",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert "Traceback" not in probe.stderr, probe.stderr[-3000:]
    return [json.loads(line) for line in probe.stdout.splitlines() if line.startswith("{")]


def assert_every_command_says_one_sentence_and_every_page_is_503(
    results: list[dict[str, object]], detail: str
) -> None:
    """Each command: non-zero, one sentence (or one JSON object), no traceback; pages: 503."""
    commands = [r for r in results if "argv" in r]
    pages = [r for r in results if "path" in r]
    probed = {r["argv"][0] for r in commands}  # type: ignore[index]
    # Every command of ours but the worker, and the bench (development tooling, in a checkout).
    assert probed == (set(our_commands()) | {"bench"}) - {"worker"}
    assert len(pages) == 5

    for r in commands:
        argv, code, out, err = r["argv"], r["code"], str(r["stdout"]), str(r["stderr"])
        assert isinstance(code, int) and code != 0, r
        assert "Traceback" not in out + err, r
        if argv[0] == "health" and "--json" in argv:  # its report, which says the database is down
            body = json.loads(out)
            assert body["database"] is False, r
            continue
        if "--json" in argv:
            assert err == "" and out.count("\n") == 1, r
            body = json.loads(out)
            assert body["code"] == "database_unavailable", r
            sentence = body["error"]
        elif argv[0] == "health":
            assert out.count("\n") == 1 and out.startswith("database: NOT reachable"), r
            continue
        else:
            assert out == "" and err.count("\n") == 1 and err.startswith("CommandError: "), r
            sentence = err.removeprefix("CommandError: ").strip()
        if argv[0] == "bench":  # the bench reaches for the server itself and says so
            assert sentence.startswith("cannot reach the database server"), r
            continue
        if argv[0] == "provider_check":  # needs no database; its own one sentence
            assert sentence == "ANTHROPIC_API_KEY is not set, so there is no provider to check.", r
            continue
        assert sentence.startswith("The database is not reachable ("), r
        assert detail in sentence, r
    said = {r["argv"][0]: r["stderr"] or r["stdout"] for r in commands}  # type: ignore[index]
    assert "so no run was started." in said["run_ticket"]
    assert "so the run was not cancelled." in said["cancel"]
    assert "so no decision was recorded." in said["decide"]
    assert "so the note was not sent." in said["steer"]
    assert "so nothing was seeded" in said["seed"]
    assert "so nothing was erased." in said["erase_customer"]
    assert "so no run was moved." in said["move_runs"]
    assert "so the webhook was not changed." in said["webhook"]
    assert "so the account was not changed." in said["deactivate_user"]
    assert "so no order was imported." in said["import_orders"]

    for page in pages:
        assert page["status"] == 503, page
        assert "The database is not reachable right now" in str(page["body"]), page


def test_with_postgres_unreachable_commands_say_what_was_not_done_and_the_web_answers_503():
    results = run_outage_probe(f"postgresql://postgres@127.0.0.1:{free_port()}/deskhand")
    assert_every_command_says_one_sentence_and_every_page_is_503(results, "Connection refused")


def test_a_real_manage_py_with_postgres_unreachable_prints_one_line_and_no_traceback():
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/deskhand",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "run_ticket", "NW-1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: The database is not reachable (")
    assert line.endswith("so no run was started.")
