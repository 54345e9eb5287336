"""Which model a run talks to.

A run records its provider name and model at creation; ``provider_for_run``
turns those back into a provider in whichever process picks the run up. With
an Anthropic key the default is Claude; without one it is the scripted policy
reader, so the whole product works keylessly.

``install_override`` is test plumbing: a test installs an explicit provider
for one run (or ``"*"`` for every run) inside its own process. Nothing outside
Python code can turn it on — no setting, no environment variable.
"""

from __future__ import annotations

from django.conf import settings

from agent.providers.base import ModelReply, Provider
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import POLICY_MODEL

_overrides: dict[str, Provider] = {}


def provider_for(name: str, model: str) -> Provider:
    if name == "scripted":
        return PolicyProvider()
    if name == "anthropic":
        if not settings.ANTHROPIC_API_KEY:
            raise ValueError(
                "this run uses the anthropic provider, but ANTHROPIC_API_KEY is not set"
            )
        from agent.providers.anthropic import AnthropicProvider, RetryPolicy

        return AnthropicProvider(
            api_key=settings.ANTHROPIC_API_KEY,
            model=model,
            base_url=settings.ANTHROPIC_BASE_URL,
            retry=RetryPolicy(**getattr(settings, "ANTHROPIC_RETRY", {})),
        )
    raise ValueError(f"unknown provider {name!r}; expected 'anthropic' or 'scripted'")


def default_provider() -> tuple[str, str]:
    """(name, model) a new run records: Claude with a key, the scripted policy without."""
    if settings.ANTHROPIC_API_KEY:
        return ("anthropic", settings.ANTHROPIC_MODEL)
    return ("scripted", POLICY_MODEL)


def install_override(run_id_or_star: str, provider: Provider) -> None:
    """Tests only: make one run (or every run, ``"*"``) use ``provider``."""
    _overrides[run_id_or_star] = provider


def clear_overrides() -> None:
    _overrides.clear()


def provider_for_run(run_id: str, name: str, model: str) -> Provider:
    override = _overrides.get(run_id) or _overrides.get("*")
    return override if override is not None else provider_for(name, model)


__all__ = [
    "ModelReply",
    "Provider",
    "clear_overrides",
    "default_provider",
    "install_override",
    "provider_for",
    "provider_for_run",
]
