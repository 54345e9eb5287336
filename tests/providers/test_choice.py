"""Which provider a run gets: Claude with a key, the policy reader without, overrides in tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent import providers
from agent.providers import (
    clear_overrides,
    default_provider,
    install_override,
    provider_for,
    provider_for_run,
)
from agent.providers.anthropic import AnthropicProvider
from agent.providers.policy import PolicyProvider
from agent.providers.pricing import UnknownModel
from agent.providers.scripted import ScriptedProvider
from tests.devtools.doubles import ObedientProvider


@pytest.fixture(autouse=True)
def no_overrides() -> Iterator[None]:
    clear_overrides()
    yield
    clear_overrides()


def test_without_a_key_the_default_is_the_scripted_policy(settings) -> None:
    settings.ANTHROPIC_API_KEY = ""

    assert default_provider() == ("scripted", "scripted-policy-1")
    provider = provider_for(*default_provider())
    assert isinstance(provider, PolicyProvider)
    assert (provider.name, provider.model) == ("scripted", "scripted-policy-1")


def test_with_a_key_the_default_is_claude(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-test"
    settings.ANTHROPIC_MODEL = "claude-sonnet-4-6"
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"

    assert default_provider() == ("anthropic", "claude-sonnet-4-6")
    provider = provider_for(*default_provider())
    assert isinstance(provider, AnthropicProvider)
    assert (provider.name, provider.model) == ("anthropic", "claude-sonnet-4-6")
    assert str(provider._client.base_url).startswith("http://127.0.0.1:9")


def test_an_anthropic_run_without_a_key_fails_loudly(settings) -> None:
    settings.ANTHROPIC_API_KEY = ""

    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        provider_for("anthropic", "claude-sonnet-4-6")


def test_an_unpriced_model_or_unknown_provider_is_refused(settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-test"

    with pytest.raises(UnknownModel):
        provider_for("anthropic", "claude-imaginary-9")
    with pytest.raises(ValueError, match="unknown provider"):
        provider_for("openai", "gpt")


def test_an_override_applies_to_its_run_only(settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    script = ScriptedProvider([])
    install_override("run-1", script)

    assert provider_for_run("run-1", "scripted", "scripted-policy-1") is script
    assert isinstance(provider_for_run("run-2", "scripted", "scripted-policy-1"), PolicyProvider)


def test_a_star_override_applies_to_every_run_and_clears() -> None:
    obedient = ObedientProvider()
    install_override("*", obedient)

    assert provider_for_run("any-run", "scripted", "scripted-policy-1") is obedient
    clear_overrides()
    assert providers._overrides == {}
    assert provider_for_run("any-run", "scripted", "scripted-policy-1") is not obedient


def test_the_suite_never_takes_a_key_from_the_shell() -> None:
    """``tests/conftest.py`` drops the key and endpoint a developer's shell may export, for this
    process and the worker subprocesses it starts, so no test reaches the real API by default
    (run the suite with ``ANTHROPIC_API_KEY`` set and this still holds)."""
    import os

    assert "ANTHROPIC_API_KEY" not in os.environ and "ANTHROPIC_BASE_URL" not in os.environ
    assert default_provider() == ("scripted", "scripted-policy-1")
