"""Model pricing is exact integer arithmetic, rounded once, and never silently free."""

from __future__ import annotations

import typing

import anthropic
import pytest

from agent.providers.pricing import (
    PRICES,
    RATES,
    UNPRICED,
    UnknownModel,
    cost_micros,
    is_priced,
    rates,
    require_priced,
)


def _sdk_models() -> list[str]:
    """The model names the pinned SDK offers (the Literal inside ``anthropic.types.Model``)."""
    (literal, _str) = typing.get_args(anthropic.types.Model)
    return list(typing.get_args(literal))


def test_the_published_rates_are_in_the_table() -> None:
    assert rates("claude-opus-5") == rates("claude-opus-4-8") == (5000, 25000)
    assert rates("claude-sonnet-4-6") == (3000, 15000)
    assert rates("claude-sonnet-5") == rates("claude-sonnet-5-5") == (2000, 10000)
    assert rates("claude-opus-5-5") == (4000, 20000)
    assert rates("claude-fable-5-2") == (8000, 40000)
    assert rates("claude-fable-5-1") == rates("claude-mythos-5") == (10000, 50000)
    assert rates("claude-haiku-4-5") == (1000, 5000)
    assert rates("claude-haiku-5-5") == (100, 500)
    assert all(isinstance(n, int) for pair in RATES.values() for n in pair)


def test_every_model_the_sdk_lists_is_priced_or_refused_with_a_reason() -> None:
    models = _sdk_models()
    assert len(models) >= 20  # the Literal was found, not an empty tuple
    for model in models:
        if model.removesuffix("-20251001").removesuffix("-20251101") in UNPRICED:
            assert not is_priced(model)
        else:
            assert is_priced(model), model
    # Nothing is both priced and declared unpriced, and every unpriced entry is a real SDK model.
    assert not set(PRICES) & set(UNPRICED)
    assert set(UNPRICED) <= set(models)


def test_require_priced_refuses_an_unpriced_model_in_one_sentence() -> None:
    require_priced("claude-sonnet-4-6")
    require_priced("claude-opus-4-5-20251101")
    with pytest.raises(UnknownModel) as info:
        require_priced("claude-mythos-preview")
    message = str(info.value)
    assert "claude-mythos-preview" in message and "no published price" in message
    assert message.endswith(".") and message.count(". ") == 0 and "\n" not in message
    with pytest.raises(UnknownModel, match="not in the price table"):
        require_priced("claude-imaginary-9")


def test_cache_rates_are_per_model_not_one_multiplier() -> None:
    # Opus 5.5 and Sonnet 5.5 read the cache at 0.05x input, Fable 5.1 at 0.025x.
    assert cost_micros("claude-opus-5-5", 0, 0, cache_read=1000) == 200
    assert cost_micros("claude-sonnet-5-5", 0, 0, cache_read=1000) == 100
    assert cost_micros("claude-sonnet-5", 0, 0, cache_read=1000) == 200
    assert cost_micros("claude-fable-5-1", 0, 0, cache_read=1000) == 250
    assert cost_micros("claude-fable-5", 0, 0, cache_read=1000) == 1000
    assert cost_micros("claude-fable-5-2", 0, 0, cache_write=1000) == 10_000


def test_haiku_5_5_bills_a_long_prompt_at_the_higher_band() -> None:
    # Up to 100,000 prompt tokens (input + cache reads + writes): $0.10 / $0.50 per MTok.
    assert cost_micros("claude-haiku-5-5", 100_000, 1000) == 10_000 + 500
    # One token more and every token of the request, output included, costs 5x.
    assert (
        cost_micros("claude-haiku-5-5", 100_001, 1000)
        == (100_001 * 500 + 1000 * 2500 + 500) // 1000
    )
    assert (
        cost_micros("claude-haiku-5-5", 50_000, 0, cache_read=50_001)
        == (50_000 * 500 + 50_001 * 50 + 500) // 1000
    )


def test_it_prices_input_and_output_tokens() -> None:
    # 1000 * 3000 + 100 * 15000 = 4_500_000 nanodollars = 4500 micro-dollars.
    assert cost_micros("claude-sonnet-4-6", 1000, 100) == 4500
    assert cost_micros("claude-opus-5", 2000, 1000) == 35_000
    assert cost_micros("claude-haiku-4-5", 0, 0) == 0


def test_cache_reads_cost_a_tenth_and_writes_a_quarter_more() -> None:
    assert cost_micros("claude-opus-4-8", 0, 0, cache_read=1000) == 500
    assert cost_micros("claude-opus-4-8", 0, 0, cache_write=1000) == 6250
    assert cost_micros("claude-sonnet-4-6", 10, 20, cache_read=300, cache_write=40) == (
        (10 * 3000 + 20 * 15000 + 300 * 300 + 40 * 3750 + 500) // 1000
    )


def test_it_rounds_half_up() -> None:
    # Haiku cache reads cost 100 nanodollars a token.
    assert cost_micros("claude-haiku-4-5", 0, 0, cache_read=4) == 0
    assert cost_micros("claude-haiku-4-5", 0, 0, cache_read=5) == 1
    assert cost_micros("claude-haiku-4-5", 0, 0, cache_read=14) == 1
    assert cost_micros("claude-haiku-4-5", 0, 0, cache_read=15) == 2


def test_it_rounds_once_per_call_not_per_component() -> None:
    # 300 + 300 nanodollars: each alone rounds to 0, together they are 600 -> 1.
    assert cost_micros("claude-sonnet-4-6", 0, 0, cache_read=1) == 0
    assert cost_micros("claude-sonnet-4-6", 0, 0, cache_read=2) == 1


def test_the_cost_is_an_integer() -> None:
    assert type(cost_micros("claude-opus-5", 123_456, 7_890, 1_111, 2_222)) is int


def test_an_unknown_model_raises_rather_than_costing_nothing() -> None:
    with pytest.raises(UnknownModel, match="claude-imaginary-9"):
        cost_micros("claude-imaginary-9", 10, 10)
    with pytest.raises(UnknownModel):
        cost_micros("scripted-policy-1", 0, 0)


def test_a_dated_snapshot_costs_what_its_family_costs() -> None:
    assert cost_micros("claude-haiku-4-5-20251001", 1000, 0) == cost_micros(
        "claude-haiku-4-5", 1000, 0
    )


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_token_counts_must_be_non_negative_integers(bad: object) -> None:
    with pytest.raises(ValueError):
        cost_micros("claude-sonnet-4-6", bad, 0)  # type: ignore[arg-type]
