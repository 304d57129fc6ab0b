"""Fan identity rules: the canonical Fan ID and e-mail normalisation. Pure, no I/O.

Fan IDs (like coupon codes and QR tokens) are ASCII, and only ASCII letters change case
(domain.ascii): a Fan ID with another character (`otroſi01`, a Cyrillic `О`, a zero-width
space) is refused where a Fan ID is given (back office, fixtures), and matches no fan
where a POS value is read (domain.fan_ref). E-mails may hold any letter; they compare
with ASCII letters case-insensitive and every other character exactly (`email_key`)."""

from __future__ import annotations

import re

from loyalty_grpc.domain.ascii import ascii_lower
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.text import matching

_WHITESPACE = re.compile(r"\s+")


def canonical_fan_id(text: str, campo: str = "fan_id") -> str:
    """The canonical Fan ID: every whitespace character removed, upper case. Empty →
    campo_requerido naming `campo`; a character that is not ASCII (checked before any
    case change) → solicitud_invalida."""
    compact = _WHITESPACE.sub("", text)
    if not compact:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    if not compact.isascii():
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: un Fan ID solo lleva caracteres ASCII (letras sin acentos, dígitos, "
            "signos); trae otros",
        )
    return compact.upper()


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
    """The form two e-mails are compared in: ASCII letters in lower case, every other
    character as it is (`Kiki@` with the Kelvin sign is not `kiki@`; `Á` is not `á`).
    Matches the store's lookup and unique index on lower(correo COLLATE "C")."""
    return ascii_lower(correo)


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
