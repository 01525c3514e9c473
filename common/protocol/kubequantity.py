"""Kubernetes' quantity syntax ("200Mi", "2k", "500m", "3e3") read as a Decimal.

The kubernetes Python client's `kubernetes.utils.quantity.parse_quantity`, ported line for
line (Apache-2.0, as this project): importing it from the client loads the whole client
(`kubernetes.utils` imports `kubernetes.client`, urllib3, sockets and threads), which the
protocol package must not (pyproject's contract). tests/common/test_kubequantity.py checks
that both answer every input alike: the same number, or the same error.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_EXPONENTS = {
    "n": -3,
    "u": -2,
    "m": -1,
    "K": 1,
    "k": 1,
    "M": 2,
    "G": 3,
    "T": 4,
    "P": 5,
    "E": 6,
}


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """The quantity's value. Suffixes: base 1024 Ki Mi Gi Ti Pi Ei, base 1000 n u m k M G T P E
    (and K, as the client reads it). Raises ValueError on what is not a quantity, and
    decimal's ArithmeticError where the arithmetic itself fails (a signalling NaN, an overflow),
    exactly as the client does."""
    if isinstance(quantity, int | float | Decimal):
        return Decimal(quantity)

    text = str(quantity)
    number = text
    suffix = None
    if len(text) >= 2 and text[-1] == "i":
        if text[-2] in _EXPONENTS:
            number = text[:-2]
            suffix = text[-2:]
    elif len(text) >= 1 and text[-1] in _EXPONENTS:
        number = text[:-1]
        suffix = text[-1:]

    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None

    if suffix is None:
        return value

    if suffix.endswith("i"):
        base = 1024
    elif len(suffix) == 1:
        base = 1000
    else:
        raise ValueError(f"{text} has unknown suffix")

    # handle SI inconsistency (the client's words): "ki" is no suffix
    if suffix == "ki":
        raise ValueError(f"{text} has unknown suffix")

    if suffix[0] not in _EXPONENTS:
        raise ValueError(f"{text} has unknown suffix")

    exponent = Decimal(_EXPONENTS[suffix[0]])
    return value * (base**exponent)
