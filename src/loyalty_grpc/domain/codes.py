"""Promotion code text rules. Pure, no I/O."""

from __future__ import annotations

from loyalty_grpc.domain.errors import Codigo, LoyaltyError


def normalize_code(text: str, campo: str = "codigo") -> str:
    """A code as stored and compared: trimmed, upper case. Empty → campo_requerido."""
    codigo = text.strip().upper()
    if not codigo:
        raise LoyaltyError(Codigo.CAMPO_REQUERIDO, f"{campo}: vacío")
    return codigo
