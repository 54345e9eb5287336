"""``python manage.py provider_check [--model M]``: is Claude reachable, and does caching engage?

Sends one small request through ``AnthropicProvider`` — the product's own
system prompt and tool schemas (so the cached prefix is the one runs send),
one short user turn, ``max_tokens`` 16 — and prints the model, the latency,
the tokens and whether the prompt cache engaged (written or read). The key is
``ANTHROPIC_API_KEY`` and the endpoint ``ANTHROPIC_BASE_URL`` (unset: the real
API), read from the environment first and the settings second. On any failure
it prints one sentence and exits 1; without a key it says so and exits 1,
sending nothing.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from agent.conversation.prompts import system_prompt
from agent.providers.anthropic import AnthropicProvider, ProviderError, RetryPolicy
from agent.providers.pricing import UnknownModel
from agent.tools import api_schemas
from deskhand.domain.cli import DeskhandCommand

CHECK_TOKEN = "provider-check"
MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Reply with the word: ok"}]}]


class Command(DeskhandCommand):
    help = "Send one small request to the Anthropic API and report latency and caching."
    # The check needs no database, and Django's model checks would open a connection (a
    # GeneratedField asks the server's version): skip them so a machine whose database is
    # down or not yet created can still check its key.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--model", default=None, help="default: DESKHAND_MODEL / settings")

    def handle(self, *args: Any, **opts: Any) -> None:
        key = os.environ.get("ANTHROPIC_API_KEY") or settings.ANTHROPIC_API_KEY
        if not key:
            raise CommandError("ANTHROPIC_API_KEY is not set, so there is no provider to check.")
        base_url = os.environ.get("ANTHROPIC_BASE_URL") or settings.ANTHROPIC_BASE_URL
        model = opts["model"] or settings.ANTHROPIC_MODEL
        try:
            provider = AnthropicProvider(
                api_key=key,
                model=model,
                base_url=base_url,
                max_tokens=16,
                retry=RetryPolicy(max_attempts=2, budget_seconds=10.0),
            )
            reply = provider.complete(
                system=system_prompt(CHECK_TOKEN), messages=MESSAGES, tools=api_schemas()
            )
        except (ProviderError, UnknownModel) as exc:
            raise CommandError(f"The check failed: {str(exc).rstrip('.')}.") from None
        except Exception as exc:  # anything else the SDK or network throws: still one sentence
            raise CommandError(f"The check failed: {type(exc).__name__}: {exc}.") from None

        if reply.cache_read_tokens:
            caching = f"engaged (read {reply.cache_read_tokens} tokens from the cache)"
        elif reply.cache_write_tokens:
            caching = (
                f"engaged (wrote {reply.cache_write_tokens} tokens; a call within 5 minutes reads "
                "them)"
            )
        else:
            caching = (
                "not engaged (no cache read or write: the prefix is below the model's minimum)"
            )
        where = base_url or "https://api.anthropic.com"
        self.stdout.write(
            f"model:     {reply.model} at {where}\n"
            f"latency:   {reply.latency_ms} ms\n"
            f"tokens:    {reply.input_tokens} in, {reply.output_tokens} out, "
            f"{reply.cache_write_tokens} cache write, {reply.cache_read_tokens} cache read\n"
            f"stop:      {reply.stop_reason}\n"
            f"caching:   {caching}\n"
            f"cost:      {reply.cost_micros} micro-dollars\n"
        )
