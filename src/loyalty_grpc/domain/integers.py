"""Integers as the service reads them: the range of what the store and the protocol carry
(PostgreSQL `integer`, protobuf `int32`: ids, folios, points, balances), and what counts
as an integer in a JSON number. Every such rule is stated here once; each field's parser
(amounts, roster, codes) adds its own range and error."""

from __future__ import annotations

import math
from decimal import Decimal

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def integral(value: int | float | Decimal) -> int | None:
    """A JSON number's integer value: an int as it is, a finite float or Decimal (how the
    fixture reads numbers) without a fractional part (`5.0`, `1.5e2`) as that integer;
    None for anything else (`5.5`, infinities, NaN). Check a Decimal's range first: its
    exponent is unbounded."""
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):
        whole = value.is_finite() and value == value.to_integral_value()
        return int(value) if whole else None
    if math.isfinite(value) and value.is_integer():
        return int(value)
    return None


__all__ = ["INT32_MAX", "INT32_MIN", "integral"]
