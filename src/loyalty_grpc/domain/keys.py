"""API keys: the Bearer header, the prefix that gives the mode, the stored hash, and the
strength a key must have to be created (domain/secret_strength.py)."""

from __future__ import annotations

import hashlib
import re
import secrets
from enum import StrEnum

from loyalty_grpc.domain import secret_strength
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError


class Modo(StrEnum):
    VIVO = "vivo"
    PRUEBA = "prueba"


# A key's prefix names its mode: `lp_vivo_`, `lp_prueba_`.
PREFIJOS: dict[Modo, str] = {modo: f"lp_{modo.value}_" for modo in Modo}
_MODOS: dict[str, Modo] = {prefijo: modo for modo, prefijo in PREFIJOS.items()}
# The fewest letters or digits after the prefix of a well-formed key.
MIN_SECRET_LENGTH = 24
_KEY = re.compile(
    f"({'|'.join(map(re.escape, PREFIJOS.values()))})[A-Za-z0-9]{{{MIN_SECRET_LENGTH},}}"
)
_BEARER = re.compile(r"Bearer +(\S+)", re.IGNORECASE)
SECRET_LENGTH = 32

# The detalle of each refusal of a POS call's credential. The gateway gives the same ones
# from the headers alone (gateway/envelope.lua, written by scripts/gen_edge.py).
FALTA_AUTHORIZATION = "falta el encabezado Authorization"
NO_ES_BEARER = "el encabezado Authorization debe ser 'Bearer <clave>'"
CLAVE_DESCONOCIDA = "la clave no existe o fue revocada"
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def bearer_token(header: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, or no_autenticado."""
    if not header:
        raise LoyaltyError(CodigoError.NO_AUTENTICADO, FALTA_AUTHORIZATION)
    match = _BEARER.fullmatch(header.strip())
    if match is None:
        raise LoyaltyError(CodigoError.NO_AUTENTICADO, NO_ES_BEARER)
    return match.group(1)


def mode_of(key: str) -> Modo | None:
    """The key's mode from its prefix, or None when it is not a well-formed key."""
    match = _KEY.fullmatch(key)
    return _MODOS[match.group(1)] if match else None


def require_well_formed(key: str) -> Modo:
    """For keys given to the back office or a fixture: the mode, or clave_mal_formada."""
    modo = mode_of(key)
    if modo is None:
        raise LoyaltyError(
            CodigoError.CLAVE_MAL_FORMADA,
            f"una clave es '{PREFIJOS[Modo.VIVO]}' o '{PREFIJOS[Modo.PRUEBA]}' seguido de "
            f"{MIN_SECRET_LENGTH} o más letras o dígitos",
        )
    return modo


def require_strong(key: str) -> Modo:
    """For a key about to be created from outside (a fixture's key not stored yet): the
    mode, or clave_mal_formada when it is malformed or its secret part (after the prefix)
    is weak by domain/secret_strength.py. The detalle never repeats the key. Keys already
    stored keep working whatever they look like: only creation is checked."""
    modo = require_well_formed(key)
    verdict = secret_strength.weakness(key.removeprefix(PREFIJOS[modo]))
    if verdict is not None:
        raise LoyaltyError(
            CodigoError.CLAVE_MAL_FORMADA,
            f"la parte secreta de la clave (tras {PREFIJOS[modo]!r}) "
            f"{secret_strength.motivo(verdict)}; genere una al azar",
        )
    return modo


def key_hash(key: str) -> bytes:
    """What the store keeps: SHA-256 of the whole key."""
    return hashlib.sha256(key.encode()).digest()


def new_key(modo: Modo) -> str:
    return PREFIJOS[modo] + "".join(secrets.choice(_ALPHABET) for _ in range(SECRET_LENGTH))


def suffix(key: str) -> str:
    """Last four characters: enough to tell keys apart in listings, useless to an attacker."""
    return key[-4:]
