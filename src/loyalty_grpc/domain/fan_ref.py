"""The `fan` value of `fan/resolve` and `tx`: what the scanner delivered, classified in the
order of DESIGN.md §2. Pure, no I/O; the store tries the readings in this order.

- At most MAX_FAN_TEXT characters as sent (any alias): a longer value is 400
  `solicitud_invalida` naming the field and the length, never the value (personal data).
  The largest form is a full QR URL; an e-mail has at most 254 characters.
- Fan IDs, coupon codes and QR tokens are ASCII (domain.fans, domain.codes), and only
  ASCII letters change case (domain.ascii): a QR token or a text value with any other
  character can be none of them, so it matches no fan without asking the store
  (`FanRef.matchable`). An e-mail keeps its other characters as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar
from urllib.parse import urlsplit

from loyalty_grpc.domain.ascii import ascii_upper
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fans import email_key

_URL = re.compile(r"https?://", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
# The request fields that carry the fan, the contract's name first.
FAN_FIELDS = ("fan", "fan_id", "qr", "codigo")
MAX_FAN_TEXT = 512
"""The longest `fan` value (or alias) read, in characters as sent (the gateway's body
limits of `fan/resolve` and `tx` are sized on it)."""

T = TypeVar("T")


class Forma(StrEnum):
    # `{qr_url}/v/<token>`: the last non-empty path segment is the QR token.
    QR_URL = "qr_url"
    # Contains `@`: the e-mail, case-insensitive.
    CORREO = "correo"
    # Anything else: a Fan ID, else a coupon code delivered to a fan, else a raw QR token.
    TEXTO = "texto"


@dataclass(frozen=True)
class FanRef:
    forma: Forma
    # QR_URL: the token; CORREO: the e-mail's compared form (domain.fans.email_key);
    # TEXTO: whitespace removed and upper-cased (the canonical Fan ID / code form).
    valor: str
    # TEXTO only: the trimmed value as scanned, tried last as a QR token (case matters).
    crudo: str = ""

    @property
    def matchable(self) -> bool:
        """False when no fan can match: a QR token or a text value that is not ASCII (no
        Fan ID, code or token is), so it is not found without a query."""
        return self.forma is Forma.CORREO or self.valor.isascii()


def parse_fan_ref(text: str, campo: str = "fan") -> FanRef:
    """How the value of the field `campo` is read (module doc)."""
    if len(text) > MAX_FAN_TEXT:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: más de {MAX_FAN_TEXT} caracteres ({len(text)}); ningún fan se "
            "identifica con un valor tan largo",
        )
    value = text.strip()
    if _URL.match(value):
        segments = [s for s in urlsplit(value).path.split("/") if s]
        if not segments:
            raise LoyaltyError(CodigoError.FAN_NO_ENCONTRADO, "la URL del QR no trae un token")
        return FanRef(Forma.QR_URL, segments[-1])
    if "@" in value:
        return FanRef(Forma.CORREO, email_key(value))
    return FanRef(Forma.TEXTO, ascii_upper(_WHITESPACE.sub("", value)), value)


def one_of(values: Mapping[str, T | None], *, required: bool = True) -> tuple[str, T] | None:
    """The one field of `values` (a field and its aliases, in the contract's order) that
    the client set: campo_requerido when none (and `required`), solicitud_invalida when
    more than one."""
    given = [(name, value) for name, value in values.items() if value is not None]
    if len(given) == 1:
        return given[0]
    names = " / ".join(values)  # (only for an error: a call that fails)
    if given:
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"envíe solo uno de {names} (llegaron {', '.join(n for n, _ in given)})",
        )
    if required:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"falta {names}")
    return None


def not_found(ref: FanRef) -> LoyaltyError:
    """fan_no_encontrado for `ref` (the value is never echoed: it is personal data)."""
    return LoyaltyError(
        CodigoError.FAN_NO_ENCONTRADO,
        f"ningún fan activo del programa coincide (leído como {ref.forma})",
    )
