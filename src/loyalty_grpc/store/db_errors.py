"""One line saying what went wrong with the database, fit for a log line or a console
error: the exception's class and SQLSTATE, and its text only where that text names
infrastructure (a host, a table, a role), never where it may quote data.

runtime/logs.py withholds the text of every database exception, because SQLSTATE classes
such as 22 (data exception) and 23 (integrity violation) quote parameters and row values.
The classes let through here do not: they name connections, authentication, databases,
schema objects, resources and operator actions.
"""

from __future__ import annotations

import psycopg
from sqlalchemy import exc as sa_exc

# SQLSTATE classes whose primary message names infrastructure, not data: 08 connection
# exception, 28 invalid authorization, 3D invalid catalog name, 42 syntax error or access
# rule violation (undefined table/column…), 53 insufficient resources, 57 operator
# intervention (shutdown, admin command), 58 system error.
_INFRASTRUCTURE = frozenset({"08", "28", "3D", "42", "53", "57", "58"})


def one_line(error: BaseException) -> str:
    """E.g. `UndefinedTable (42P01): relation "wallet_outbox" does not exist`,
    `OperationalError: connection failed: connection to server at "10.0.0.5", port 5432
    failed: Connection refused`, `UniqueViolation (23505)` (text withheld)."""
    if isinstance(error, sa_exc.DBAPIError) and error.orig is not None:
        error = error.orig
    name = type(error).__name__
    if isinstance(error, psycopg.Error):
        sqlstate = error.sqlstate
        if sqlstate is None:  # raised by the client (connection failed, …): no data in it
            return _joined(name, _first_line(str(error)))
        text = error.diag.message_primary if sqlstate[:2] in _INFRASTRUCTURE else None
        return _joined(f"{name} ({sqlstate})", text)
    if isinstance(error, sa_exc.SQLAlchemyError):
        return name  # its text may quote the statement's data
    return _joined(name, _first_line(str(error)))


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def _joined(name: str, text: str | None) -> str:
    return f"{name}: {text}" if text else name
