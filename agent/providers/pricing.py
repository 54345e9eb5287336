"""What a model call costs, in integers.

Rates are nanodollars per token so every price in the table is exact; a call's
cost is rounded to micro-dollars once, half up, at the end. No floats anywhere:
spend bounds compare these numbers, and a bound that drifts by rounding is not
a bound. An unknown model raises rather than costing nothing, because a silent
zero would let a run spend without limit.

Cache reads and writes have their own rate per model: the multipliers are not
uniform (Opus 5.5 and Sonnet 5.5 read at 0.05x input, Fable 5.1 at 0.025x,
most others at 0.1x), so the table states each rate instead of deriving it.
Writes are the 5-minute rate (1.25x input everywhere it is published); the
provider never asks for the 1-hour TTL.

Source of every number: the "Model pricing" table of
https://platform.claude.com/docs/en/about-claude/pricing and the models'
overview pages under https://platform.claude.com/docs/en/models/ (read
2026-12-01), with the Sonnet 5.5 cache-read cut to $0.10/MTok of 2026-10-07
and Fable 5.2's row ($8 / $10 / $0.20 / $40) as released 2026-11-09.
$1 per million tokens is 1,000 nanodollars per token.

The SDK pinned in pyproject (anthropic 2.15) also lists ``claude-mythos-5-2``
and ``claude-mythos-preview``; no published price for either was found, so
they are in ``UNPRICED`` and a run on them is refused at start.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    """Nanodollars per token."""

    input: int
    output: int
    cache_write: int
    cache_read: int


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    rates: Rates
    # Haiku 5.5 bills a request whose prompt (input + cache reads + cache writes)
    # exceeds ``long_prompt_threshold`` tokens at ``long_prompt`` rates, every token of it.
    long_prompt: Rates | None = None
    long_prompt_threshold: int = 0


def _flat(input: int, output: int, cache_write: int, cache_read: int) -> Price:
    return Price(Rates(input, output, cache_write, cache_read))


_OPUS_4_5_TO_5 = _flat(5000, 25000, 6250, 500)
_FABLE_5 = _flat(10000, 50000, 12500, 1000)
_FABLE_5_1 = _flat(10000, 50000, 12500, 250)

PRICES: dict[str, Price] = {
    "claude-fable-5-2": _flat(8000, 40000, 10000, 200),
    "claude-fable-5-1": _FABLE_5_1,
    "claude-mythos-5-1": _FABLE_5_1,
    "claude-fable-5": _FABLE_5,
    "claude-mythos-5": _FABLE_5,
    "claude-opus-5-5": _flat(4000, 20000, 5000, 200),
    "claude-opus-5": _OPUS_4_5_TO_5,
    "claude-opus-4-8": _OPUS_4_5_TO_5,
    "claude-opus-4-7": _OPUS_4_5_TO_5,
    "claude-opus-4-6": _OPUS_4_5_TO_5,
    "claude-opus-4-5": _OPUS_4_5_TO_5,
    "claude-sonnet-5-5": _flat(2000, 10000, 2500, 100),
    "claude-sonnet-5": _flat(2000, 10000, 2500, 200),
    "claude-sonnet-4-6": _flat(3000, 15000, 3750, 300),
    "claude-haiku-5-5": Price(
        Rates(100, 500, 125, 10),
        long_prompt=Rates(500, 2500, 625, 50),
        long_prompt_threshold=100_000,
    ),
    "claude-haiku-4-5": _flat(1000, 5000, 1250, 100),
}

# Listed by the pinned SDK, price not published where we looked: refused, never guessed.
UNPRICED: dict[str, str] = {
    "claude-mythos-5-2": "no published price found (limited availability)",
    "claude-mythos-preview": "no published price found (invitation-only preview)",
}

# (input, output) per model, for callers that only need the headline rates.
RATES: dict[str, tuple[int, int]] = {m: (p.rates.input, p.rates.output) for m, p in PRICES.items()}

# A dated snapshot id ("claude-haiku-4-5-20251001") costs what its family costs.
_SNAPSHOT = re.compile(r"-\d{8}$")


class UnknownModel(LookupError):
    """No price is known for this model; refuse rather than count it as free."""


def price(model: str) -> Price:
    family = _SNAPSHOT.sub("", model)
    try:
        return PRICES[family]
    except KeyError:
        why = UNPRICED.get(family, "not in the price table")
        raise UnknownModel(
            f"Model {model!r} cannot be used because its price is unknown ({why}); "
            f"priced models: {', '.join(PRICES)}."
        ) from None


def rates(model: str) -> tuple[int, int]:
    """(input, output) nanodollars per token for ``model``."""
    r = price(model).rates
    return (r.input, r.output)


def require_priced(model: str) -> None:
    """For a run's start: raise ``UnknownModel`` (one sentence) if ``model`` has no price."""
    price(model)


def is_priced(model: str) -> bool:
    try:
        price(model)
    except UnknownModel:
        return False
    return True


def cost_micros(
    model: str, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
) -> int:
    """The call's cost in micro-dollars, rounded half up once."""
    counts = (input_tokens, output_tokens, cache_read, cache_write)
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts):
        raise ValueError(f"token counts must be non-negative integers, got {counts}")
    p = price(model)
    r = p.rates
    if p.long_prompt is not None and input_tokens + cache_read + cache_write > (
        p.long_prompt_threshold
    ):
        r = p.long_prompt
    nanos = (
        input_tokens * r.input
        + output_tokens * r.output
        + cache_read * r.cache_read
        + cache_write * r.cache_write
    )
    return (nanos + 500) // 1000
