"""Promotion code text rules: the one source for every path that reads codes (POST
/api/v1/codes, the back office, fixtures, `loyalty admin codes import`). Pure, no I/O.

- A code is stored and compared trimmed and upper-cased (`code_text`; `normalize_code`
  also refuses an empty one). Only ASCII letters change case (domain.ascii): a look-alike
  (`ı`, `ſ`, the Kelvin sign, fullwidth or Cyrillic letters) is never folded into an
  ASCII one, so `hd-dısp-0001` is not `HD-DISP-0001`.
- A new code (deposited, imported or in a fixture) must also be valid (`check_new_code`):
  not empty, at most MAX_CODE_LENGTH characters, no control characters, none of the
  characters that separate codes in pasted text (whitespace, ``,``, ``;``) — so the array
  and the text forms deposit the same codes, and `fan/resolve` (which removes whitespace)
  can find every code —, and only ASCII characters (a code is typed, printed and scanned:
  a letter that only looks like another one, or an invisible one, would make two codes
  that read alike).
- Pasted text splits on runs of whitespace, commas and semicolons (`split_codes`; the CLI
  streams a file through `split_code_stream`, the same rule).
- At most MAX_CODES_PER_CALL codes per call, counted as read (before repeats are removed):
  the limit bounds the work of the call, and the client can check it without normalising.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from loyalty_grpc.domain.ascii import ascii_upper
from loyalty_grpc.domain.detalle import MAX_DETALLE, shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.integers import INT32_MAX, integral
from loyalty_grpc.domain.json_value import JsonValue, json_type_name
from loyalty_grpc.domain.promos import MAX_NOMBRE, EstadoPromo
from loyalty_grpc.domain.text import has_control_characters

MAX_CODE_LENGTH = 64
MAX_CODES_PER_CALL = 5000
# Offending codes named in a codigo_invalido detalle at most (fewer when they would make
# it longer than domain.detalle.MAX_DETALLE).
MAX_SHOWN_INVALID = 3

# What separates codes in pasted text: whitespace (`\s` is Unicode whitespace: NBSP, em
# space, U+2028…), commas and semicolons.
_SEPARATOR = re.compile(r"[\s,;]")
_SEPARATORS = re.compile(r"[\s,;]+")
_PIECE = re.compile(r"[^\s,;]+")
_LIST_SEPARATOR = re.compile(r"[,;]")


def too_many_codes(campo: str, maximo: int) -> str:
    """The detalle of demasiados_codigos: `campo` brought more than `maximo` codes. One text
    for `codes` and `redeem`, and for the gateway, which stops reading a list at the limit
    (gateway/request_check.lua, written by scripts/gen_request_check.py)."""
    return f"{campo}: más de {maximo} códigos en una llamada; envíelos en varias"


def code_text(text: str) -> str:
    """A code as stored and compared: trimmed, ASCII letters in upper case (may be empty;
    other characters as they are, so a non-ASCII code stays one)."""
    return ascii_upper(text.strip())


def normalize_code(text: str, campo: str = "codigo") -> str:
    """A code as stored and compared (`code_text`). Empty → campo_requerido."""
    codigo = code_text(text)
    if not codigo:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
    return codigo


def code_problem(codigo: str) -> str | None:
    """Why a normalised code cannot be a new code, or None when it can."""
    if not codigo:
        return "vacío"
    if len(codigo) > MAX_CODE_LENGTH:
        return f"más de {MAX_CODE_LENGTH} caracteres ({len(codigo)})"
    if has_control_characters(codigo):  # C0/C1; in pasted text tab and newline split first
        return "contiene caracteres de control"
    if _SEPARATOR.search(codigo):
        return "contiene espacios, comas o punto y coma (separan códigos)"
    if not codigo.isascii():
        return "contiene caracteres que no son ASCII (un código es ASCII)"
    return None


def check_new_code(text: str, campo: str = "codigo") -> str:
    """A new code, normalised; codigo_invalido when it breaks a rule."""
    codigo = code_text(text)
    problem = code_problem(codigo)
    if problem is not None:
        raise LoyaltyError(CodigoError.CODIGO_INVALIDO, f"{campo}: {problem}")
    return codigo


@dataclass(frozen=True)
class PromoRef:
    """Which promotion a deposit names: by `id`, else (when no promotion of the program
    has that id, or none was given) by `nombre`, case-insensitive."""

    id: int | None
    nombre: str | None


_DIGITS = re.compile(r"[0-9]+")


def parse_promo_ref(value: JsonValue, campo: str = "promo") -> PromoRef:
    """`promo` as sent: a JSON integer is an id; a string of digits is an id (or, when no
    promotion has that id, a name); any other string is a name (at most
    domain.promos.MAX_NOMBRE characters, trimmed)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LoyaltyError(
            CodigoError.SOLICITUD_INVALIDA,
            f"{campo}: debe ser el id (número) o el nombre (texto) de la "
            f"promoción, llegó {json_type_name(value)}",
        )
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: vacío")
        if len(text) > MAX_NOMBRE:
            raise LoyaltyError(
                CodigoError.SOLICITUD_INVALIDA,
                f"{campo}: más de {MAX_NOMBRE} caracteres ({len(text)}); ninguna promoción "
                "tiene un nombre tan largo",
            )
        if _DIGITS.fullmatch(text):
            number = int(text)
            return PromoRef(number if number <= INT32_MAX else None, text)
        return PromoRef(None, text)
    promo_id = integral(value)
    if promo_id is None:
        raise LoyaltyError(CodigoError.SOLICITUD_INVALIDA, f"{campo}: el id debe ser un entero")
    if not 1 <= promo_id <= INT32_MAX:
        raise LoyaltyError(
            CodigoError.PROMO_NO_ENCONTRADA,
            f"{campo}: no existe la promoción {shown(str(promo_id), quote=False)}",
        )
    return PromoRef(promo_id, None)


def admite_codigos(estado: EstadoPromo) -> bool:
    """A promotion takes new codes unless it has ended."""
    return estado is not EstadoPromo.TERMINADA


def check_admite_codigos(nombre: str, estado: EstadoPromo) -> None:
    if not admite_codigos(estado):
        raise LoyaltyError(
            CodigoError.PROMO_NO_ADMITE_CODIGOS,
            f"promo {shown(nombre)}: está {estado.value}, no admite códigos",
        )


# --------------------------------------------------------------------- splitting


def split_codes(text: str) -> list[str]:
    """Pasted text → the pieces between runs of whitespace, commas and semicolons."""
    return list(_pieces(text))


def several_codes(codigo: str) -> int:
    """How many codes a single code text looks like when it is a pasted list ("HD-0101,
    HD-0102"): the number of pieces between separators when there are at least two, each
    could be a new code (`code_problem`), and either a comma or semicolon separates them
    or they all have the same length ("HD-0101 HD-0102"; "HD 0101" is more likely one
    code typed with a space); else 0. Only for explaining a code not found: a code stored
    before the separator rule may itself contain a space."""
    if not _SEPARATOR.search(codigo):
        return 0
    pieces = split_codes(codigo)
    if len(pieces) < 2 or any(code_problem(code_text(piece)) for piece in pieces):
        return 0
    if not _LIST_SEPARATOR.search(codigo) and len({len(piece) for piece in pieces}) > 1:
        return 0
    return len(pieces)


def _pieces(text: str) -> Iterator[str]:
    """The pieces of pasted text, lazily (a caller may stop reading at the limit)."""
    return (m.group() for m in _PIECE.finditer(text))


def split_code_stream(
    chunks: Iterable[str], *, max_piece: int = 4 * MAX_CODE_LENGTH
) -> Iterator[str]:
    """`split_codes` over text that arrives in chunks (a file read piece by piece): a code
    cut by a chunk boundary comes out whole. Memory stays bounded: a piece longer than
    `max_piece` (never a valid code) comes out cut to `max_piece` characters and the rest
    of it is skipped."""
    carry = ""
    skipping = False  # inside an over-long piece already given out
    for chunk in chunks:
        parts = _SEPARATORS.split(carry + chunk)
        tail = parts.pop()  # after the last separator: may go on in the next chunk
        if parts and skipping:
            parts[0], skipping = "", False  # the over-long piece ends here
        for piece in parts:
            if piece:
                yield piece[:max_piece]
        if skipping:
            carry = ""
        elif len(tail) > max_piece:
            yield tail[:max_piece]
            carry, skipping = "", True
        else:
            carry = tail
    if carry:
        yield carry


# --------------------------------------------------------------------- a batch


@dataclass(frozen=True)
class CodeBatch:
    """The codes of one deposit: normalised, repeats removed, in first-seen order."""

    codigos: tuple[str, ...]
    # Entries read (repeats included): what the per-call limit counts.
    leidos: int


@dataclass(frozen=True)
class _Invalid:
    where: str
    codigo: str
    problem: str


def code_batch(
    items: Iterable[str], campo: str = "codigos", *, pasted: bool = False, start: int = 0
) -> CodeBatch:
    """Validate and normalise the codes of one call. `items`: the array's elements, or the
    pieces of pasted text (`pasted`: positions then count pieces from 1, plus `start`, the
    pieces read before these in the same text, e.g. the earlier chunks of a file).

    demasiados_codigos over MAX_CODES_PER_CALL entries (reading stops there); else
    codigo_invalido naming the first MAX_SHOWN_INVALID offenders and how many there are;
    else campo_requerido when there is no code at all."""
    seen: dict[str, None] = {}
    invalid: list[_Invalid] = []
    leidos = 0
    for index, item in enumerate(items):
        leidos += 1
        if leidos > MAX_CODES_PER_CALL:
            raise LoyaltyError(
                CodigoError.DEMASIADOS_CODIGOS, too_many_codes(campo, MAX_CODES_PER_CALL)
            )
        codigo = code_text(item)
        problem = code_problem(codigo)
        if problem is not None:
            where = (
                f"{campo}: código {start + index + 1} del texto" if pasted else f"{campo}[{index}]"
            )
            invalid.append(_Invalid(where, codigo, problem))
        elif not invalid:
            seen[codigo] = None
    if invalid:
        raise LoyaltyError(CodigoError.CODIGO_INVALIDO, _invalid_detalle(invalid))
    if not seen:
        raise LoyaltyError(CodigoError.CAMPO_REQUERIDO, f"{campo}: no trae ningún código")
    return CodeBatch(tuple(seen), leidos)


def _invalid_detalle(invalid: list[_Invalid]) -> str:
    """How many codes are invalid and the first ones (at most MAX_SHOWN_INVALID, as many
    as fit in MAX_DETALLE, at least one), each with where it is and its problem."""
    head = f"{len(invalid)} código(s) no válido(s), no se agregó ninguno: "
    named: list[str] = []
    for i in invalid[:MAX_SHOWN_INVALID]:
        entry = f"{i.where} {shown(i.codigo)}: {i.problem}"
        rest = len(invalid) - len(named) - 1
        more = f" (y {rest} más)" if rest else ""
        if named and len(head) + len("; ".join([*named, entry])) + len(more) > MAX_DETALLE:
            break
        named.append(entry)
    rest = len(invalid) - len(named)
    return head + "; ".join(named) + (f" (y {rest} más)" if rest else "")


def code_batch_of_json(value: JsonValue, campo: str = "codigos") -> CodeBatch:
    """`codigos` as the client sent it: an array of strings, or pasted text."""
    if isinstance(value, str):
        return code_batch(_pieces(value), campo, pasted=True)
    if isinstance(value, list):
        return code_batch(_strings(value, campo), campo)
    raise LoyaltyError(
        CodigoError.SOLICITUD_INVALIDA,
        f"{campo}: debe ser una lista de textos o un texto, llegó {json_type_name(value)}",
    )


def code_batch_of_list(items: Sequence[str], campo: str = "codigos") -> CodeBatch:
    """Codes already split (one per element), e.g. one chunk of `codes import`."""
    return code_batch(items, campo)


def _strings(items: list[JsonValue], campo: str) -> Iterator[str]:
    """The array's elements; a non-string element is a wrong JSON type (solicitud_invalida,
    like any other), named by position."""
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise LoyaltyError(
                CodigoError.SOLICITUD_INVALIDA,
                f"{campo}[{index}]: debe ser texto, llegó {json_type_name(item)}",
            )
        yield item
