"""The strict Messages-API double, deciding like the scripted policy reader.

``FakeAnthropic`` is ``tests.support.messages_api.MessagesApi`` with the
``PolicyProvider`` as its responder and fixed usage per call, for tests that
drive whole runs through the real ``anthropic`` SDK and count requests at the
provider (outside any database transaction), so a test can prove a resumed run
never repeats a paid call. Being the strict double, it also refuses any request
the real API would (roles, tool ids, schemas, breakpoints), and it mints fresh
tool ids, so a run that only works with predictable ids fails here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agent.providers.policy import PolicyProvider
from tests.support.messages_api import MessagesApi


def policy_responder(policy: PolicyProvider) -> Any:
    def respond(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        system = body.get("system") or ""
        if isinstance(system, list):
            system = "\n".join(b.get("text", "") for b in system)
        reply = policy.complete(
            system=system, messages=body["messages"], tools=body.get("tools", [])
        )
        return reply.content, reply.stop_reason

    return respond


class FakeAnthropic(MessagesApi):
    def __init__(self, input_tokens: int = 1000, output_tokens: int = 100) -> None:
        policy = PolicyProvider(
            input_tokens=input_tokens, output_tokens=output_tokens, cost_micros=0
        )
        # Any non-empty key: the worker subprocesses are started with a dummy one.
        super().__init__(
            api_key=None,
            responder=policy_responder(policy),
            usage=(input_tokens, output_tokens),
        )
        self.input_tokens, self.output_tokens = input_tokens, output_tokens


@contextlib.contextmanager
def policy_double(settings: Any, model: str) -> Iterator[MessagesApi]:
    """The strict double answering like the policy reader, with the Anthropic provider pointed
    at it through ``settings`` (a pytest-django settings fixture) for the ``with`` block."""
    from agent.providers.anthropic import clear_clients
    from tests.support.messages_api import DEFAULT_KEY

    policy = PolicyProvider(input_tokens=0, output_tokens=0, cost_micros=0)
    with MessagesApi(responder=policy_responder(policy)) as double:
        settings.ANTHROPIC_API_KEY = DEFAULT_KEY
        settings.ANTHROPIC_BASE_URL = double.url
        settings.ANTHROPIC_MODEL = model
        yield double
    clear_clients()


def settle(run: Any) -> Any:
    """Wait until ``run`` ends or waits for a person."""
    from tests.fixtures.dbos import wait_for_run

    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )
