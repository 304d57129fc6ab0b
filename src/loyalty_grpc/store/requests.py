"""The back office's request ids (domain/requests.py): claiming one, and the answer kept
for it (table `peticiones`).

`claim` inserts the id's row in the caller's transaction before the write runs. A
concurrent call with the same id waits on that row (the primary key) until the first
transaction ends: when it commits, the second finds the row and its answer; when it rolls
back (the write failed), the second claims the id itself. So of two identical calls racing
each other, one applies the write and the other answers what it answered.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection


class RequestKey(NamedTuple):
    programa: str
    metodo: str
    request_id: str


class Earlier(NamedTuple):
    """A request applied before under the same key: its SHA-256 and its answer."""

    huella: bytes
    respuesta: bytes


_CLAIM = """
INSERT INTO peticiones (programa_id, metodo, request_id, huella)
VALUES (%(programa)s, %(metodo)s, %(request_id)s, %(huella)s)
ON CONFLICT DO NOTHING
"""

_EARLIER = """
SELECT huella, respuesta FROM peticiones
WHERE programa_id = %(programa)s AND metodo = %(metodo)s AND request_id = %(request_id)s
"""

_ANSWER = """
UPDATE peticiones SET respuesta = %(respuesta)s
WHERE programa_id = %(programa)s AND metodo = %(metodo)s AND request_id = %(request_id)s
"""


def claim(conn: Connection, key: RequestKey, huella: bytes) -> Earlier | None:
    """Claim `key` for this transaction (None), or the request applied before with it
    (after waiting for a concurrent claim of it to end)."""
    params = {**key._asdict(), "huella": huella}
    if conn.exec_driver_sql(_CLAIM, params).rowcount == 1:
        return None
    row = conn.exec_driver_sql(_EARLIER, params).one()
    if row.respuesta is None:  # only the claiming transaction sees its row unanswered
        raise RuntimeError(f"request {key} claimed in this transaction and not answered")
    return Earlier(bytes(row.huella), bytes(row.respuesta))


def answer(conn: Connection, key: RequestKey, respuesta: bytes) -> None:
    """Keep the answer of the request `key` claimed in this transaction."""
    conn.exec_driver_sql(_ANSWER, {**key._asdict(), "respuesta": respuesta})
