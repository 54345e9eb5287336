"""What a model call costs, in integers.

Rates are nanodollars per token so every price in the table is exact; a call's
cost is rounded to micro-dollars once, half up, at the end. No floats anywhere:
spend bounds compare these numbers, and a bound that drifts by rounding is not
a bound. An unknown model raises rather than costing nothing, because a silent
zero would let a run spend without limit.
"""

from __future__ import annotations

import re

# model -> (input, output) nanodollars per token.
RATES: dict[str, tuple[int, int]] = {
    "claude-opus-5": (5000, 25000),
    "claude-opus-4-8": (5000, 25000),
    "claude-sonnet-5": (3000, 15000),
    "claude-sonnet-4-6": (3000, 15000),
    "claude-haiku-4-5": (1000, 5000),
}

# A dated snapshot id ("claude-haiku-4-5-20251001") costs what its family costs.
_SNAPSHOT = re.compile(r"-\d{8}$")


class UnknownModel(LookupError):
    """No price is known for this model; refuse rather than count it as free."""


def rates(model: str) -> tuple[int, int]:
    """(input, output) nanodollars per token for ``model``."""
    try:
        return RATES[_SNAPSHOT.sub("", model)]
    except KeyError:
        raise UnknownModel(f"no price for model {model!r}; known: {', '.join(RATES)}") from None


def cost_micros(
    model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
) -> int:
    """The call's cost in micro-dollars, rounded half up once."""
    counts = (input_tokens, output_tokens, cache_read, cache_write)
    if any(not isinstance(n, int) or n < 0 for n in counts):
        raise ValueError(f"token counts must be non-negative integers, got {counts}")
    per_input, per_output = rates(model)
    nanos = (
        input_tokens * per_input
        + output_tokens * per_output
        + cache_read * (per_input // 10)
        + cache_write * (per_input * 125 // 100)
    )
    return (nanos + 500) // 1000
