"""Named model scripts: the trajectories the evals and the crash sweep play.

The policy reader (``PolicyProvider``) decides from what the tools return and
never asks to refund NW-3 (delivered 91 days ago, outside the window), so the
denial path needs a model that asks anyway: ``NW3_ASKS``. Scripts are
deterministic — turn N answers a history holding N assistant messages — so a
recovered run replays to the same calls with the same ids.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.providers.base import Provider
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import ScriptedProvider, call, say
from tests.devtools.doubles import ObedientProvider
from tests.devtools.load.world import LoadProvider

NW3_DENIAL_REASON = "Delivered 91 days ago, well outside the 30-day window."


def nw3_asks() -> ScriptedProvider:
    """NW-3: a model that asks to refund the whole subscription, then escalates when refused."""
    return ScriptedProvider(
        [
            [call("get_ticket", reference="NW-3")],
            [call("get_order", reference="NW-0918")],
            [call("search_kb", query="refund policy")],
            [
                call(
                    "issue_refund",
                    order_reference="NW-0918",
                    amount_cents=15600,
                    reason="Customer no longer drinks coffee; refund the prepaid year.",
                )
            ],
            [call("set_ticket_status", reference="NW-3", status="escalated")],
            [
                say(
                    "I asked to refund 156.00 USD against NW-0918; a person declined it. "
                    "No money was moved and the ticket is escalated for a person to answer."
                )
            ],
        ],
        model="scripted-nw3-asks",
    )


def nw1_exact() -> ScriptedProvider:
    """NW-1 the way the reference's canonical eval plays it: one 19.00 refund, a note, done."""
    return ScriptedProvider(
        [
            [call("get_ticket", reference="NW-1")],
            [call("get_order", reference="NW-1042")],
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=1900,
                    reason="Stale beans inside the published window.",
                )
            ],
            [call("add_internal_note", reference="NW-1", body="Refund issued after approval.")],
            [say("Refunded 19.00 against NW-1042 and noted it on the ticket.")],
        ],
        model="scripted-nw1-exact",
    )


PROVIDERS: dict[str, Callable[[], Provider]] = {
    "park": LoadProvider,  # each LOAD- ticket refunds its own order (tests.devtools.load.world)
    "policy": PolicyProvider,
    "obedient": ObedientProvider,
    "nw3-asks": nw3_asks,
    "nw1-exact": nw1_exact,
}


def provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]()
    except KeyError:
        raise ValueError(f"no script named {name!r}; known: {', '.join(PROVIDERS)}") from None
