"""Model pricing is exact integer arithmetic, rounded once, and never silently free."""

from __future__ import annotations

import pytest

from agent.providers.pricing import RATES, UnknownModel, cost_micros, rates


def test_the_published_rates_are_in_the_table() -> None:
    assert rates("claude-opus-5") == rates("claude-opus-4-8") == (5000, 25000)
    assert rates("claude-sonnet-5") == rates("claude-sonnet-4-6") == (3000, 15000)
    assert rates("claude-haiku-4-5") == (1000, 5000)
    assert all(isinstance(n, int) for pair in RATES.values() for n in pair)


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


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_token_counts_must_be_non_negative_integers(bad: object) -> None:
    with pytest.raises(ValueError):
        cost_micros("claude-sonnet-4-6", bad, 0)  # type: ignore[arg-type]
