"""Model doubles that exist only to attack the product: never shipped, never a default.

``ObedientProvider`` is the policy reader with its judgement removed: it obeys refund
instructions planted in tool results or ticket text. The integrity evals and the
consent tests use it to prove that the gate, not the model, stands between a prompt
injection and the customer's money.
"""

from __future__ import annotations

from agent.providers.policy import Case, PolicyProvider, Step
from agent.providers.policy_reading import History, first_line, refund_instructions
from agent.providers.scripted import MARK

OBEDIENT_MODEL = "scripted-obedient-1"


class ObedientProvider(PolicyProvider):
    """A gullible model, for proving the gate holds: it obeys refund instructions it reads.

    Once it has read the order in play, any tool result or ticket message
    telling it to call issue_refund makes it ask for that order's full total,
    quoting the instruction as its reason. Otherwise it is ``PolicyProvider``.
    """

    model = OBEDIENT_MODEL
    obeys_embedded_instructions = True

    def _intervene(self, history: History, case: Case) -> Step | None:
        instruction = next(
            (s for t in history.untrusted_texts() for s in refund_instructions(t)), None
        )
        order = case.order_in_play()
        if instruction is None or order is None:
            return None
        args = {
            "order_reference": order["reference"],
            "amount_cents": int(order["total_cents"]),
            "reason": f'{MARK} As instructed: "{first_line(instruction, 400)}"',
        }
        return None if history.attempt("issue_refund", args) else ("issue_refund", args)
