"""Redeeming coupon codes (`redeem`): the contract's state table, the choice among copies
of one code text, batches. Pure, no I/O.

State table (spec, "Coupon code states"): `asignado` → `canjeado` (redeemed now, `duplicado`
false); `canjeado` → unchanged, `duplicado` true; `liberado` → 409 `codigo_liberado`;
`disponible` → 409 `codigo_no_asignado`; a text the program does not have → 404
`codigo_no_encontrado` (also one no code can be: with a non-ASCII or control character,
found without asking the store). A text over MAX_CODE_LENGTH characters is no code at all:
400 `codigo_invalido`, the whole call refused. No other condition applies (the
promotion's state or end date, or the fan being in `baja`, do not stop a redemption).

Several copies of one text: the pair (promotion, code) is unique, the text alone is not.
A redemption acts on one copy, chosen deterministically by RANGO (a redeemable `asignado`
copy first, then `canjeado`, `liberado`, `disponible`), then by the oldest row (lowest
id) — the same order `fan/resolve` uses for the codes it reads. So while an `asignado`
copy is left the text is redeemed; once all are redeemed the answer is `duplicado`.

A batch is answered as the single form would answer its codes one after the other, in
input order: a text repeated in a batch is redeemed at its first occurrence and is
`duplicado` (or redeems the next `asignado` copy) at the next one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from loyalty_grpc.domain.codes import (
    MAX_CODE_LENGTH,
    code_problem,
    several_codes,
    too_many_codes,
)
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.text import has_control_characters

# Spec, Limits: codes per `redeem` batch.
MAX_CODIGOS = 500

# Which copy of a text a redemption acts on: lowest rank first, then lowest id.
RANGO: dict[EstadoCodigo, int] = {
    EstadoCodigo.ASIGNADO: 0,
    EstadoCodigo.CANJEADO: 1,
    EstadoCodigo.LIBERADO: 2,
    EstadoCodigo.DISPONIBLE: 3,
}
# RANGO as the states in order of preference (store/redeem.py's SQL sorts copies by it).
PREFERENCIA: tuple[str, ...] = tuple(e.value for e in sorted(RANGO, key=RANGO.__getitem__))


class Outcome(StrEnum):
    """What one code of a request comes to."""

    CANJEADO = "canjeado"  # redeemed by this request: 200, duplicado false
    DUPLICADO = "duplicado"  # redeemed before: 200, duplicado true, 0 points
    LIBERADO = "liberado"  # 409 codigo_liberado
    NO_ASIGNADO = "no_asignado"  # 409 codigo_no_asignado
    NO_ENCONTRADO = "no_encontrado"  # 404 codigo_no_encontrado


_ERRORES: dict[Outcome, CodigoError] = {
    Outcome.LIBERADO: CodigoError.CODIGO_LIBERADO,
    Outcome.NO_ASIGNADO: CodigoError.CODIGO_NO_ASIGNADO,
    Outcome.NO_ENCONTRADO: CodigoError.CODIGO_NO_ENCONTRADO,
}
_POR_ESTADO: dict[EstadoCodigo, Outcome] = {
    EstadoCodigo.ASIGNADO: Outcome.CANJEADO,
    EstadoCodigo.CANJEADO: Outcome.DUPLICADO,
    EstadoCodigo.LIBERADO: Outcome.LIBERADO,
    EstadoCodigo.DISPONIBLE: Outcome.NO_ASIGNADO,
}


@dataclass(frozen=True)
class Copy:
    """One stored code row with the text: its id and its current state."""

    id: int
    estado: EstadoCodigo


@dataclass(frozen=True)
class Step:
    """The outcome of one input code: its normalised text, the copy it acted on (None when
    not found) and what came of it."""

    codigo: str
    copia: int | None
    outcome: Outcome

    @property
    def error(self) -> CodigoError | None:
        return _ERRORES.get(self.outcome)

    def failure(self) -> LoyaltyError | None:
        """The single form's error for this outcome (None on a 200)."""
        codigo = self.error
        if codigo is None:
            return None
        detalle = {
            Outcome.LIBERADO: "fue liberado (retirado de circulación sin usarse); "
            "no se puede canjear",
            Outcome.NO_ASIGNADO: "no se ha entregado a ningún fan; no se puede canjear",
            Outcome.NO_ENCONTRADO: "el programa no tiene ese código",
        }[self.outcome]
        if codigo is CodigoError.CODIGO_NO_ENCONTRADO:
            detalle += _several_hint(self.codigo)
        return LoyaltyError(codigo, f"codigo {shown(self.codigo)}: {detalle}")


@dataclass(frozen=True)
class Resumen:
    """`data.resumen` of a batch. `recibidos` counts input entries, repeats included, so
    recibidos = canjeados + duplicados + rechazados."""

    recibidos: int
    canjeados: int
    duplicados: int
    rechazados: int


def _several_hint(codigo: str) -> str:
    """For a code text not found (or too long to be one) that looks like several codes
    pasted into one text: where they go. Empty otherwise."""
    several = several_codes(codigo)
    if not several:
        return ""
    return (
        f"; parecen {several} códigos en un texto: para canjear varios, envíelos como "
        'lista en "codigos" (["A", "B"]), uno por elemento'
    )


def could_exist(codigo: str) -> bool:
    """False for a normalised text no stored code can have (empty, control characters,
    not ASCII; over MAX_CODE_LENGTH is refused first: `check_length`): such a code is
    not found without asking the store. (Separators are not checked: a code stored
    before that rule may contain a space.)"""
    return (
        0 < len(codigo) <= MAX_CODE_LENGTH
        and codigo.isascii()
        and not has_control_characters(codigo)
    )


def check_length(codigo: str, campo: str, index: int | None = None) -> None:
    """codigo_invalido for a normalised text over MAX_CODE_LENGTH characters (the largest
    a redemption takes): no code is that long. A batch (`index`: the entry's position) is
    refused whole, naming the entry (`codigos[3]`), before anything is redeemed."""
    if len(codigo) > MAX_CODE_LENGTH:
        where = campo if index is None else f"{campo}[{index}]"
        raise LoyaltyError(
            CodigoError.CODIGO_INVALIDO,
            f"{where} {shown(codigo)}: {code_problem(codigo)}; ningún código es tan largo"
            + _several_hint(codigo),
        )


def check_batch_size(n: int) -> None:
    if n > MAX_CODIGOS:
        raise LoyaltyError(CodigoError.DEMASIADOS_CODIGOS, too_many_codes("codigos", MAX_CODIGOS))


def choose(copias: Iterable[Copy]) -> Copy | None:
    """The copy a redemption of the text acts on (RANGO, then the oldest), or None."""
    return min(copias, key=lambda c: (RANGO[c.estado], c.id), default=None)


def plan(codigos: Sequence[str], copias: Mapping[str, Sequence[Copy]]) -> list[Step]:
    """The outcome of each normalised text of `codigos`, in order, as successive single
    redemptions would give it, given the current copies of each text (texts absent from
    `copias` are not found). A copy redeemed by an earlier entry counts as `canjeado` for the
    later ones."""
    estados = {c.id: c.estado for grupo in copias.values() for c in grupo}
    steps: list[Step] = []
    for codigo in codigos:
        elegida = choose(Copy(c.id, estados[c.id]) for c in copias.get(codigo, ()))
        if elegida is None:
            steps.append(Step(codigo, None, Outcome.NO_ENCONTRADO))
            continue
        if elegida.estado is EstadoCodigo.ASIGNADO:
            estados[elegida.id] = EstadoCodigo.CANJEADO
        steps.append(Step(codigo, elegida.id, _POR_ESTADO[elegida.estado]))
    return steps


def summarize(steps: Sequence[Step]) -> Resumen:
    def count(outcome: Outcome) -> int:
        return sum(1 for p in steps if p.outcome is outcome)

    return Resumen(
        recibidos=len(steps),
        canjeados=count(Outcome.CANJEADO),
        duplicados=count(Outcome.DUPLICADO),
        rechazados=sum(1 for p in steps if p.error is not None),
    )
