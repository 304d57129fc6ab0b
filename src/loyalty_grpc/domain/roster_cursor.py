"""Roster feed cursors (`desde` / `siguiente`): opaque, URL-safe, bound to one program and
to the database cluster that issued them.

A cursor is a position in the program's feed, never a time:

- `Fase.FOTO` (snapshot paging): `xid` is the snapshot's horizon W (the oldest transaction
  running when the snapshot began) and `pk` the last fan delivered; the next page holds the
  fans after `pk`. After the last page the feed continues from `Posicion(CAMBIOS, W, 0)`.
- `Fase.CAMBIOS` (changes): everything at positions up to (`xid`, `pk`) was delivered;
  the next page holds the changes after it, ordered by (writer's transaction id, pk).

Text (version 2): base64url without padding of 34 bytes: version (1), phase (1), the
issuing placement identity (8: the cluster's system identifier; on Citus a value of the
node and the shard placement of the program's fans, store/roster.PageState.lugar), xid
(8), pk (8), all unsigned big-endian, and an 8-byte tag = SHA-256(domain, program id,
the 26 bytes)[:8].

The system identifier is PostgreSQL's (`pg_control_system()`): a physical standby and a
physical backup share it with their primary, so a cursor survives a failover and a restore
of a physical backup; a cluster built another way (initdb, a logical dump restored into it,
pg_upgrade) has its own, and its transaction counter is not the one the cursor's position
counts in. The service also requires a record that this database issued the cursor
(store/roster_cursors.py; docs/roster.md "Cursors across a failover or a restore").

Version 1 cursors (26 bytes, no system identifier, no record) are recognised and refused:
nothing says which database issued them nor whether it still holds the changes they
passed (docs/roster.md: the one-time re-snapshot at the upgrade).

Why a checksum and not an HMAC: the tag is there to refuse another program's cursor and
mangled text (a wrong tag has a 2^-64 chance), not to keep a secret. Whoever forges a
cursor can only move around in their own program's feed, which their key may read
entirely anyway, and every read is filtered by the key's program; a forged position is
refused anyway, having no record. A keyed MAC would need a secret shared by every server
process and kept across restarts, and rotating it would invalidate every client's stored
cursor.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass
from enum import Enum

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

VERSION = 2
_DOMAIN = b"loyalty roster cursor\x00"
_BODY = struct.Struct(">BBQQQ")
_TAG_BYTES = 8
_RAW_BYTES = _BODY.size + _TAG_BYTES
# base64url of 34 bytes, unpadded.
CURSOR_LENGTH = 46
# Version 1: version, phase, xid, pk; recognised only to say why it is refused.
_BODY_V1 = struct.Struct(">BBQQ")
_LENGTH_V1 = 35
# Positions are PostgreSQL bigints.
MAX_POSITION = 2**63 - 1
# A system identifier is an unsigned 64-bit number (PostgreSQL shows it as a signed bigint).
MAX_SISTEMA = 2**64 - 1


class Fase(Enum):
    FOTO = 1
    CAMBIOS = 2


@dataclass(frozen=True)
class Posicion:
    fase: Fase
    xid: int
    pk: int

    def __post_init__(self) -> None:
        if not (0 <= self.xid <= MAX_POSITION and 0 <= self.pk <= MAX_POSITION):
            raise ValueError(f"roster position out of range: {self}")


@dataclass(frozen=True)
class Cursor:
    """A decoded cursor: the cluster that issued it and the position it stands for."""

    sistema: int
    posicion: Posicion

    def __post_init__(self) -> None:
        if not 0 <= self.sistema <= MAX_SISTEMA:
            raise ValueError(f"system identifier out of range: {self.sistema}")


def sistema_of(system_identifier: int) -> int:
    """PostgreSQL's system_identifier (a bigint, negative above 2^63) as the unsigned
    number a cursor holds."""
    return system_identifier & MAX_SISTEMA


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _tag(programa_id: str, body: bytes) -> bytes:
    digest = hashlib.sha256(_DOMAIN + programa_id.encode() + b"\x00" + body).digest()
    return digest[:_TAG_BYTES]


def encode_cursor(programa_id: str, cursor: Cursor) -> str:
    p = cursor.posicion
    body = _BODY.pack(VERSION, p.fase.value, cursor.sistema, p.xid, p.pk)
    return _b64(body + _tag(programa_id, body))


def _invalid(detalle: str) -> LoyaltyError:
    return LoyaltyError(
        CodigoError.CURSOR_INVALIDO,
        f"desde: {detalle}; envíe el `siguiente` de la llamada anterior tal "
        "cual, u omita `desde` para empezar con una foto completa",
    )


def _raw(text: str, length: int, raw_bytes: int) -> bytes | None:
    """The bytes of `text` when it is the one canonical base64url spelling of `raw_bytes`
    bytes in `length` characters."""
    if len(text) != length or not text.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-length % 4))
    except (binascii.Error, ValueError):
        return None
    # Only the canonical spelling: b64decode ignores stray bits in the last character.
    if len(raw) != raw_bytes or _b64(raw) != text:
        return None
    return raw


def _is_version_1(programa_id: str, text: str) -> bool:
    raw = _raw(text, _LENGTH_V1, _BODY_V1.size + _TAG_BYTES)
    if raw is None:
        return False
    body, tag = raw[: _BODY_V1.size], raw[_BODY_V1.size :]
    return tag == _tag(programa_id, body) and body[0] == 1


def decode_cursor(programa_id: str, text: str) -> Cursor:
    """The cluster and position `text` stands for, or cursor_invalido when it is not a
    cursor of this program's feed in the current format (garbage, truncated, altered,
    another program's, version 1). Whether this database issued it is the store's to say."""
    raw = _raw(text, CURSOR_LENGTH, _RAW_BYTES)
    if raw is None:
        if _is_version_1(programa_id, text):
            raise _invalid(
                "cursor de una versión anterior del servicio, que ya no se acepta "
                "(no dice qué base de datos lo emitió)"
            )
        raise _invalid("no es un cursor de este feed")
    body, tag = raw[: _BODY.size], raw[_BODY.size :]
    if tag != _tag(programa_id, body):
        raise _invalid("el cursor no es de este programa o fue alterado")
    version, fase, sistema, xid, pk = _BODY.unpack(body)
    if (
        version != VERSION
        or fase not in {f.value for f in Fase}
        or xid > MAX_POSITION
        or pk > MAX_POSITION
    ):
        raise _invalid("versión de cursor desconocida")
    return Cursor(sistema, Posicion(Fase(fase), xid, pk))


def check_issued(cursor: Cursor, sistema: int, emitido: bool) -> None:
    """cursor_invalido unless `cursor` was issued by this database: under the placement
    identity `sistema` (the cluster's system identifier; on Citus, the node and shard
    placement holding the program's fans), holding its record (`emitido`)."""
    if cursor.sistema != sistema:
        raise _invalid(
            "el cursor lo emitió otra base de datos (otro clúster de PostgreSQL: "
            "restaurada de un volcado lógico, recreada o de otro entorno) o los datos "
            "del programa se movieron de nodo (Citus) desde que se emitió"
        )
    if not emitido:
        raise _invalid(
            "esta base de datos no emitió el cursor (¿se restauró una copia anterior "
            "a cuando se emitió?)"
        )


def placement_unavailable() -> LoyaltyError:
    """servicio_no_disponible (retryable): the page was not read on the node that holds the
    program's fans (on Citus, while its shard moves between nodes, or a call the
    coordinator did not delegate), so its positions would count another node's
    transaction ids. Nothing was read; the same call succeeds once the move is over."""
    return LoyaltyError(
        CodigoError.SERVICIO_NO_DISPONIBLE,
        "los datos del programa no están en el nodo que leyó la página (se están "
        "moviendo entre nodos de Citus); reintente",
    )
