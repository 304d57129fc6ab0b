"""The plain JSON value a client sent, as read from a `google.protobuf.Value`.

A JSON number arrives as a Python `float` (even `100` is `100.0`); `int` is accepted too
so that domain functions can be called directly with integers.
"""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None


def json_type_name(value: JsonValue) -> str:
    """The JSON type of `value`, in Spanish, for `detalle` ("llegó un booleano")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "un booleano"
    if isinstance(value, int | float):
        return "un número"
    if isinstance(value, str):
        return "un texto"
    if isinstance(value, list):
        return "una lista"
    return "un objeto"
