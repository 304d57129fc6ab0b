"""Roster feed cursors (`desde` / `siguiente`): opaque, URL-safe, bound to one program.

A cursor is a position in the program's feed, never a time:

- `Fase.FOTO` (snapshot paging): `xid` is the snapshot's horizon W (the oldest transaction
  running when the snapshot began) and `pk` the last fan delivered; the next page holds the
  fans after `pk`. After the last page the feed continues from `Posicion(CAMBIOS, W, 0)`.
- `Fase.CAMBIOS` (changes): everything at positions up to (`xid`, `pk`) was delivered;
  the next page holds the changes after it, ordered by (writer's transaction id, pk).

Text: base64url without padding of 26 bytes: version (1), phase (1), xid (8), pk (8), both
unsigned big-endian, and an 8-byte tag = SHA-256(domain, program id, the 18 bytes)[:8].

Why a checksum and not an HMAC: the tag is there to refuse another program's cursor and
mangled text (a wrong tag has a 2^-64 chance), not to keep a secret. Whoever forges a
cursor can only move around in their own program's feed, which their key may read
entirely anyway, and every read is filtered by the key's program. A keyed MAC would need a
secret shared by every server process and kept across restarts, and rotating it would
invalidate every client's stored cursor; a cursor must stay valid for as long as the
client keeps it. The service also refuses positions the database has not reached yet.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass
from enum import Enum

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

VERSION = 1
_DOMAIN = b"loyalty roster cursor\x00"
_BODY = struct.Struct(">BBQQ")
_TAG_BYTES = 8
_RAW_BYTES = _BODY.size + _TAG_BYTES
# base64url of 26 bytes, unpadded.
CURSOR_LENGTH = 35
# Positions are PostgreSQL bigints.
MAX_POSITION = 2**63 - 1


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


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _tag(programa_id: str, body: bytes) -> bytes:
    digest = hashlib.sha256(_DOMAIN + programa_id.encode() + b"\x00" + body).digest()
    return digest[:_TAG_BYTES]


def encode_cursor(programa_id: str, posicion: Posicion) -> str:
    body = _BODY.pack(VERSION, posicion.fase.value, posicion.xid, posicion.pk)
    return _b64(body + _tag(programa_id, body))


def _invalid(detalle: str) -> LoyaltyError:
    return LoyaltyError(
        CodigoError.CURSOR_INVALIDO,
        f"desde: {detalle}; envíe el `siguiente` de la llamada anterior tal "
        "cual, u omita `desde` para empezar con una foto completa",
    )


def decode_cursor(programa_id: str, text: str) -> Posicion:
    """The position `text` stands for, or cursor_invalido when it is not a cursor that this
    program's feed issued (garbage, truncated, altered, another program's)."""
    if len(text) != CURSOR_LENGTH or not text.isascii():
        raise _invalid("no es un cursor de este feed")
    try:
        raw = base64.urlsafe_b64decode(text + "=")
    except (binascii.Error, ValueError):
        raise _invalid("no es un cursor de este feed") from None
    # Only the canonical spelling: b64decode ignores stray bits in the last character.
    if len(raw) != _RAW_BYTES or _b64(raw) != text:
        raise _invalid("no es un cursor de este feed")
    body, tag = raw[: _BODY.size], raw[_BODY.size :]
    if tag != _tag(programa_id, body):
        raise _invalid("el cursor no es de este programa o fue alterado")
    version, fase, xid, pk = _BODY.unpack(body)
    if (
        version != VERSION
        or fase not in {f.value for f in Fase}
        or xid > MAX_POSITION
        or pk > MAX_POSITION
    ):
        raise _invalid("versión de cursor desconocida")
    return Posicion(Fase(fase), xid, pk)
