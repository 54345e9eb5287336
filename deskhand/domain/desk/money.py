"""Displaying money. Amounts are integer minor units (cents) from end to end.

Formatting is the one place money turns into text, so it is the one place a
float could sneak in; ``divmod`` on integers keeps every digit exact.

A minor unit is the currency's own: a hundredth of a dollar or a euro, a whole yen
(ISO 4217's exponent, ``MINOR_DIGITS``), so ``4000`` JPY is ``¥4,000`` and never ``¥40.00``.
"""

from __future__ import annotations

# Digits after the point in a currency's minor unit (ISO 4217), where it is not two.
MINOR_DIGITS = {
    "JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XAF": 0, "XOF": 0, "PYG": 0,
    "BHD": 3, "KWD": 3, "JOD": 3, "OMR": 3, "TND": 3, "IQD": 3, "LYD": 3,
}  # fmt: skip


def minor_digits(currency: str) -> int:
    return MINOR_DIGITS.get(currency.upper(), 2)


def _split(minor: int, currency: str) -> tuple[str, int, str]:
    """Sign, whole units and the fraction's digits ("" for a currency without a minor unit)."""
    if isinstance(minor, bool) or not isinstance(minor, int):
        raise TypeError(f"money is integer cents, not {type(minor).__name__}: {minor!r}")
    digits = minor_digits(currency)
    whole, fraction = divmod(abs(minor), 10**digits)
    return ("-" if minor < 0 else ""), whole, (f"{fraction:0{digits}d}" if digits else "")


def format_cents(cents: int, currency: str = "USD") -> str:
    """``3800`` -> ``"38.00 USD"``; ``-5`` -> ``"-0.05 USD"``; ``4000`` JPY -> ``"4000 JPY"``.

    A float or a bool is refused rather than rounded: either would mean a
    caller already lost track of what the number is.
    """
    sign, whole, fraction = _split(cents, currency)
    return f"{sign}{whole}{'.' + fraction if fraction else ''} {currency}"


# Currencies people read with a symbol in front; any other shows its code after the amount.
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def display_cents(cents: int, currency: str = "USD") -> str:
    """For people (the console, and the customer's mail): ``12400`` -> ``"$124.00"``,
    ``1250`` EUR -> ``"€12.50"``, ``4000`` JPY -> ``"¥4,000"``, ``"1,250.00 SEK"`` for a code
    without a symbol.

    Same integer arithmetic (and the same refusal of floats) as ``format_cents``,
    which stays the machine-readable form the model and the CLI see.
    """
    sign, whole, fraction = _split(cents, currency)
    symbol = SYMBOLS.get(currency, "")
    suffix = "" if symbol else f" {currency}"
    return f"{sign}{symbol}{whole:,}{'.' + fraction if fraction else ''}{suffix}"


def typed_units(minor: int, currency: str = "USD") -> str:
    """An amount as a person types it back into a form: ``17900`` -> ``"179.00"``, ``4000``
    JPY -> ``"4000"``, ``1250`` KWD -> ``"1.250"`` (what ``parse_amount`` reads)."""
    sign, whole, fraction = _split(minor, currency)
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


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
    currency (15000 cents), ``"1.5"`` is 1.50, ``"$1,250.00"`` is 1250.00. More decimals
    than the currency has (two for USD, none for JPY, three for KWD), a negative amount, or
    anything that is not a number is refused with a sentence: never rounded, never guessed.
    Parsed as text, so no float touches it.
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
    digits = minor_digits(currency)
    if len(fraction) > digits:
        raise AmountRefused(
            f"{shown!r} has more than two decimals: money is counted to the cent (like 12.50)."
            if digits == 2
            else f"{shown!r} has more decimals than {currency} has ({digits}): type it like "
            f"{typed_units(12 * 10**digits + (5 * 10 ** (digits - 1) if digits else 0), currency)}."
        )
    return int(whole or "0") * 10**digits + int(fraction.ljust(digits, "0") or "0")


class AmountMalformed(ValueError):
    """A platform's decimal string that is not an exact amount of its currency."""


def minor_from_decimal(text: str, currency: str) -> int:
    """A platform's decimal string (Shopify's ``"38.00"``, ``"4000"``, ``"1.250"``) as integer
    minor units of ``currency`` (ISO 4217's exponent, ``MINOR_DIGITS``): USD ``"38.5"`` ->
    ``3850``, JPY ``"4000.0"`` -> ``4000``, KWD ``"1.25"`` -> ``1250``.

    Read digit by digit, never through a float. Digits past the currency's exponent are
    accepted only when they are zeros (``"38.000"`` is exactly 38.00 USD, and Shopify writes
    ``"4000.0"`` for yen); a non-zero one (``"38.005"`` USD, ``"4000.5"`` JPY) is refused,
    because it would have to be rounded and money is never rounded here. So is anything that
    is not a plain decimal: exponents, a thousands separator, an empty string, ``NaN``.
    """
    raw = str(text).strip()
    sign = -1 if raw.startswith("-") else 1
    body = raw[1:] if raw[:1] in "+-" else raw
    whole, dot, fraction = body.partition(".")
    if not (
        whole.isascii()
        and whole.isdigit()
        and (fraction == "" or (fraction.isascii() and fraction.isdigit()))
        and (fraction or not dot)
    ):
        raise AmountMalformed(f"{raw[:40]!r} is not a decimal amount of {currency}.")
    digits = minor_digits(currency)
    kept, extra = fraction[:digits], fraction[digits:]
    if extra.strip("0"):
        raise AmountMalformed(
            f"{raw[:40]!r} has more decimals than {currency} has ({digits}): it would need rounding."
        )
    return sign * (int(whole) * 10**digits + int(kept.ljust(digits, "0") or "0"))


def decimal_from_minor(minor: int, currency: str) -> str:
    """Integer minor units as the plain decimal string a platform reads: ``3800`` USD ->
    ``"38.00"``, ``4000`` JPY -> ``"4000"``, ``1250`` KWD -> ``"1.250"`` (the inverse of
    ``minor_from_decimal``)."""
    sign, whole, fraction = _split(minor, currency)
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"
