"""Query parameters of a shape SQLAlchemy does not bind by itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Text, literal
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.elements import ColumnElement


def text_array(values: Iterable[str]) -> ColumnElement[Any]:
    """A list as one array parameter (`= ANY(:array)`), however long it is."""
    return literal(list(values), ARRAY(Text))
