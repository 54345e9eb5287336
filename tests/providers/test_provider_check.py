"""``manage.py provider_check``: one small request, latency and caching; one sentence on failure.

Never the real API: without a key nothing is sent, and every other path points
``ANTHROPIC_BASE_URL`` at the strict double.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.support.messages_api import DEFAULT_KEY, MessagesApi

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch, settings) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = None


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, no_key: None) -> Iterator[MessagesApi]:
    with MessagesApi() as double:
        monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", double.url)
        yield double


def check(*args: str) -> str:
    out = io.StringIO()
    call_command("provider_check", *args, stdout=out)
    return out.getvalue()


def test_without_a_key_it_says_so_in_one_sentence_and_sends_nothing(no_key: None) -> None:
    with pytest.raises(CommandError) as info:
        check()
    assert str(info.value) == "ANTHROPIC_API_KEY is not set, so there is no provider to check."


def test_without_a_key_the_command_exits_1_with_one_line_and_needs_no_database() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    # A database nobody serves: checking a key must not depend on one (CI's external-server
    # mode names a database only the test session creates, under another name).
    env["DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/no_such_database"
    done = subprocess.run(
        [sys.executable, "manage.py", "provider_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "CommandError: ANTHROPIC_API_KEY is not set, so there is no provider to check."
    ]


def test_against_the_double_it_prints_model_latency_and_caching(api: MessagesApi) -> None:
    first = check("--model", "claude-opus-4-8")
    second = check("--model", "claude-opus-4-8")

    assert api.count == 2
    body = api.requests[0].body
    assert body["max_tokens"] == 16
    assert body["model"] == "claude-opus-4-8"
    assert len(body["tools"]) > 0  # the product's own tools, so the prefix is the real one
    assert f"model:     claude-opus-4-8 at {api.url}" in first
    assert "latency:   " in first and " ms" in first
    assert "caching:   engaged (wrote" in first
    assert "caching:   engaged (read" in second


def test_a_prefix_below_the_minimum_reports_caching_not_engaged(api: MessagesApi) -> None:
    # Sonnet 4.6's minimum in the double (2048) is above the product's prefix.
    out = check("--model", "claude-sonnet-4-6")
    assert "caching:   not engaged" in out
    assert api.count == 1


def test_a_wrong_key_fails_in_one_sentence_without_the_key(
    api: MessagesApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-api03-not-the-right-one"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    with pytest.raises(CommandError) as info:
        check()
    message = str(info.value)
    assert message == (
        "The check failed: Anthropic API authentication_error (HTTP 401): invalid x-api-key."
    )
    assert secret not in message
    assert api.count == 1  # a 401 is not retried


def test_an_overloaded_api_is_retried_once_then_reported(api: MessagesApi) -> None:
    api.overloaded(times=2)
    with pytest.raises(CommandError, match="overloaded_error") as info:
        check()
    assert "gave up after 2 attempts" in str(info.value)
    assert api.count == 2


def test_an_unpriced_model_fails_before_sending(api: MessagesApi) -> None:
    with pytest.raises(CommandError, match="price is unknown"):
        check("--model", "claude-mythos-preview")
    assert api.count == 0
