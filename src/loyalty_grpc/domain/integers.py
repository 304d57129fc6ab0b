"""The integer range of what the store and the protocol carry: PostgreSQL `integer` and
protobuf `int32` (ids, folios, points, balances). Every bound on such a value is stated
here once."""

from __future__ import annotations

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

__all__ = ["INT32_MAX", "INT32_MIN"]
