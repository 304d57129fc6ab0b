"""Fan identity rules: the canonical Fan ID and e-mail normalisation. Pure, no I/O."""

from __future__ import annotations

import re

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.text import matching

_WHITESPACE = re.compile(r"\s+")


def canonical_fan_id(text: str, campo: str = "fan_id") -> str:
    """The canonical Fan ID: every whitespace character removed, upper case.
    Empty (after removing whitespace) → campo_requerido naming `campo`."""
    canonical = _WHITESPACE.sub("", text).upper()
    if not canonical:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    return canonical


def normalize_email(text: str, campo: str = "correo") -> str:
    """The e-mail trimmed, case kept as given (compare with `email_key`). It must contain
    exactly one `@` with something on both sides and no whitespace; else
    solicitud_invalida naming `campo`."""
    correo = text.strip()
    local, at, domain = correo.partition("@")
    if not at or not local or not domain or "@" in domain or _WHITESPACE.search(correo):
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: no es un correo válido")
    return correo


def email_key(correo: str) -> str:
    """The form two e-mails are compared in (case-insensitive): lower case.
    Matches the store's unique index on lower(correo)."""
    return correo.lower()


def emails_equal(a: str, b: str) -> bool:
    """Whether two (normalised) e-mails name the same mailbox for this system."""
    return email_key(a) == email_key(b)


_QR_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")
SOCIO_DESDE_MIN = 1900
SOCIO_DESDE_MAX = 2100


def new_fan_id(text: str, campo: str = "id") -> str:
    """A Fan ID for a new fan: canonical, and without `@` or `/` (the API's `fan` field
    would read such a value as an e-mail or a URL)."""
    fan_id = canonical_fan_id(text, campo)
    if "@" in fan_id or "/" in fan_id:
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: no puede contener '@' ni '/'")
    return fan_id


def check_qr_token(text: str, campo: str = "qr_token") -> str:
    """A QR token as stored: trimmed, URL-safe characters only (letters, digits, `.`, `_`,
    `~`, `-`), compared case-sensitively."""
    return matching(text, _QR_TOKEN, campo, "letras, dígitos, '.', '_', '~' y '-'")


def check_socio_desde(year: int, campo: str = "socio_desde") -> int:
    """The year of registration: SOCIO_DESDE_MIN to SOCIO_DESDE_MAX."""
    if not SOCIO_DESDE_MIN <= year <= SOCIO_DESDE_MAX:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser un año entre {SOCIO_DESDE_MIN} y {SOCIO_DESDE_MAX}",
        )
    return year


def check_temporadas(count: int, campo: str = "temporadas") -> int:
    """Number of active seasons: 0 or more."""
    if count < 0:
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: no puede ser negativo")
    return count
