"""Kubernetes quantities as integers, for capacities: what the API server writes back is
canonical ("65520Mi", "120", "8Gi"), so only whole numbers matter; a fraction rounds up
(the scheduler rounds a consumed amount up, never down)."""

from __future__ import annotations

import math
from typing import Any

from hami_dcu.common.protocol.errors import DraError
from hami_dcu.common.protocol.kubequantity import parse_quantity

_MAX_CHARS = 64  # a quantity longer than this is not one the API server would write


class QuantityError(DraError, ValueError):
    pass


def to_int(text: object, what: str) -> int:
    if not isinstance(text, str | int) or isinstance(text, bool) or len(str(text)) > _MAX_CHARS:
        raise QuantityError(f"{what}: {text!r} is not a quantity")
    try:
        value = parse_quantity(str(text))
    except (ValueError, ArithmeticError) as exc:
        raise QuantityError(f"{what}: {text!r} is not a quantity") from exc
    if not value.is_finite() or value < 0:
        raise QuantityError(f"{what}: {text!r} is not a non-negative quantity")
    return math.ceil(value)


def canonical(value: Any) -> Any:
    """`value` with every string that is a quantity read as its number, so what we wrote
    ("2000Mi") and what the API server gives back ("2000Mi", "2097152000") compare equal."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, str):
        try:
            return to_int(value, "quantity")
        except QuantityError:
            return value
    return value
