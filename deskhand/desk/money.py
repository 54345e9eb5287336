"""Displaying money. Amounts are integer minor units (cents) from end to end.

Formatting is the one place money turns into text, so it is the one place a
float could sneak in; ``divmod`` on integers keeps every digit exact.
"""

from __future__ import annotations


def format_cents(cents: int, currency: str = "USD") -> str:
    """``3800`` -> ``"38.00 USD"``; ``-5`` -> ``"-0.05 USD"``.

    A float or a bool is refused rather than rounded: either would mean a
    caller already lost track of what the number is.
    """
    if isinstance(cents, bool) or not isinstance(cents, int):
        raise TypeError(f"money is integer cents, not {type(cents).__name__}: {cents!r}")
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return f"{sign}{whole}.{fraction:02d} {currency}"


# Currencies people read with a symbol in front; any other shows its code after the amount.
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def display_cents(cents: int, currency: str = "USD") -> str:
    """For people in the console: ``12400`` -> ``"$124.00"``, ``"1,250.00 SEK"`` for a code without a symbol.

    Same integer arithmetic (and the same refusal of floats) as ``format_cents``,
    which stays the machine-readable form the model and the CLI see.
    """
    if isinstance(cents, bool) or not isinstance(cents, int):
        raise TypeError(f"money is integer cents, not {type(cents).__name__}: {cents!r}")
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    symbol = SYMBOLS.get(currency, "")
    suffix = "" if symbol else f" {currency}"
    return f"{sign}{symbol}{whole:,}.{fraction:02d}{suffix}"


def format_micros(micros: int) -> str:
    """Model spend, in micro-dollars: ``12_300`` -> ``"$0.0123"``, ``2_000_000`` -> ``"$2.00"``.

    At least two decimals, and as many more as it takes to show every micro-dollar
    spent: a step's cost is often a fraction of a cent and should not read as zero.
    """
    if isinstance(micros, bool) or not isinstance(micros, int):
        raise TypeError(f"spend is integer micro-dollars, not {type(micros).__name__}: {micros!r}")
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    digits = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole}.{digits}"


class AmountRefused(ValueError):
    """Typed money that is not an amount; the message is one sentence for the person who typed it."""


def parse_amount(text: str, currency: str = "USD") -> int:
    """What a person typed in the order's currency, as integer cents.

    People type money as they read it: ``"150"`` and ``"150.00"`` are both 150 of the
    currency (15000 cents), ``"1.5"`` is 1.50, ``"$1,250.00"`` is 1250.00. More than two
    decimals, a negative amount, or anything that is not a number is refused with a
    sentence: never rounded, never guessed. Parsed as text, so no float touches it.
    """
    raw = str(text).strip()
    shown = raw[:40]
    symbol = SYMBOLS.get(currency, "")
    cleaned = raw
    if symbol and cleaned.startswith(symbol):
        cleaned = cleaned[len(symbol) :]
    if cleaned.upper().endswith(currency.upper()):
        cleaned = cleaned[: -len(currency)]
    cleaned = cleaned.strip().replace(",", "").replace("\u00a0", "").replace(" ", "")
    if not cleaned:
        raise AmountRefused("Type an amount, for example 12 or 12.50.")
    if cleaned.startswith("-"):
        raise AmountRefused(f"{shown!r} is negative: type the amount to refund, more than 0.")
    whole, _, fraction = cleaned.partition(".")
    digits_ok = (whole == "" or (whole.isascii() and whole.isdigit())) and (
        fraction == "" or (fraction.isascii() and fraction.isdigit())
    )
    if not digits_ok or (not whole and not fraction) or len(whole) > 12:
        raise AmountRefused(f"{shown!r} is not an amount: type it like 12 or 12.50.")
    if len(fraction) > 2:
        raise AmountRefused(
            f"{shown!r} has more than two decimals: money is counted to the cent (like 12.50)."
        )
    return int(whole or "0") * 100 + int(fraction.ljust(2, "0") or "0")
