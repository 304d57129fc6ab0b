"""Plain text fields of the back office. Pure, no I/O."""

from __future__ import annotations

import re

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

# C0 and C1 control characters: no single-line text of the service holds one (codes
# included: domain/codes.py).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_MULTILINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def has_control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


def single_line(
    text: str, campo: str, *, required: bool = True, max_length: int | None = None
) -> str:
    """Single-line text: trimmed, no control characters, at most `max_length` characters;
    empty → campo_requerido unless not `required`."""
    value = text.strip()
    if not value and required:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    if max_length is not None and len(value) > max_length:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: más de {max_length} caracteres ({len(value)})",
        )
    if has_control_characters(value):
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: contiene caracteres de control"
        )
    return value


def matching(text: str, pattern: re.Pattern[str], campo: str, allowed: str) -> str:
    """A required token (trimmed) that must match `pattern` whole; `allowed` tells the
    person what the pattern admits."""
    value = text.strip()
    if not value:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    if not pattern.fullmatch(value):
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: solo {allowed}")
    return value


def multi_line(text: str, campo: str) -> str:
    """Free text that may span lines (tabs and newlines allowed); may be empty."""
    value = text.strip()
    if _CONTROL_MULTILINE.search(value):
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA, f"{campo}: contiene caracteres de control"
        )
    return value
