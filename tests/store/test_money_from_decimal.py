"""A platform's decimal strings become integer minor units of their currency, never a float."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskhand.domain.desk.money import AmountMalformed, decimal_from_minor, minor_from_decimal


@pytest.mark.parametrize(
    ("text", "currency", "minor"),
    [
        ("38.00", "USD", 3800),
        ("38.0", "USD", 3800),
        ("38.5", "USD", 3850),
        ("38", "USD", 3800),
        ("0.01", "USD", 1),
        ("38.000", "USD", 3800),  # zeros past the exponent are exact
        ("4000", "JPY", 4000),
        ("4000.0", "JPY", 4000),  # how Shopify writes yen
        ("1.25", "KWD", 1250),
        ("1.250", "KWD", 1250),
        ("0.005", "KWD", 5),
        ("-2.50", "EUR", -250),
        ("12345678901234.56", "USD", 1234567890123456),  # past a float's exact digits
    ],
)
def test_each_currency_is_read_with_its_own_exponent(text, currency, minor):
    assert minor_from_decimal(text, currency) == minor


@pytest.mark.parametrize(
    ("text", "currency"),
    [
        ("38.005", "USD"),  # would need rounding
        ("4000.5", "JPY"),
        ("1.2505", "KWD"),
        ("1e3", "USD"),
        ("1,000.00", "USD"),
        ("", "USD"),
        ("38.", "USD"),
        (".5", "USD"),
        ("NaN", "USD"),
        ("Infinity", "USD"),
        ("\u0663\u0668", "USD"),  # digits, but not ASCII ones
    ],
)
def test_what_is_not_an_exact_amount_is_refused_with_a_sentence(text, currency):
    with pytest.raises(AmountMalformed, match=currency):
        minor_from_decimal(text, currency)


def test_minor_units_are_written_back_as_the_platform_reads_them():
    assert decimal_from_minor(3800, "USD") == "38.00"
    assert decimal_from_minor(4000, "JPY") == "4000"
    assert decimal_from_minor(1250, "KWD") == "1.250"
    with pytest.raises(TypeError):
        decimal_from_minor(38.0, "USD")  # type: ignore[arg-type]


@given(
    minor=st.integers(min_value=0, max_value=10**15),
    currency=st.sampled_from(["USD", "JPY", "KWD", "EUR", "BHD"]),
)
def test_writing_and_reading_back_is_the_same_integer(minor, currency):
    assert minor_from_decimal(decimal_from_minor(minor, currency), currency) == minor
