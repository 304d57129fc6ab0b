"""Integers as the service reads them: the range of what the store and the protocol carry
(PostgreSQL `integer`, protobuf `int32`: ids, folios, points, balances), and what counts
as an integer in a JSON number. Every such rule is stated here once; each field's parser
(amounts, roster, codes) adds its own range and error."""

from __future__ import annotations

import math

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def integral(value: int | float) -> int | None:
    """A JSON number's integer value: an int as it is, a finite float without a fractional
    part (`5.0`) as that integer; None for anything else (`5.5`, infinities, NaN)."""
    if isinstance(value, int):
        return value
    if math.isfinite(value) and value.is_integer():
        return int(value)
    return None


__all__ = ["INT32_MAX", "INT32_MIN", "integral"]
