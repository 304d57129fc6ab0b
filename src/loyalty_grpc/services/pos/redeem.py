"""`redeem`: redeem one coupon code or a batch, in the calling key's program.

Both forms redeem through one store function (store/redeem.redeem), so a redemption writes
the same columns and credits the same way whichever form asks. The single form is one
statement, the cashier's hot path: it chooses the copy itself. A batch is one transaction:
the redemptions and their points commit together or not at all. Its steps, concurrency left
to PostgreSQL's row locks:

1. Lock every copy of every requested text (store/redeem.lock_copies, one round trip; it
   also reads each copy's promotion and fan). A concurrent redemption of the same code
   waits here and then reads the state the other committed, so of 20 concurrent
   redemptions one is `duplicado: false` and one credits.
2. Decide every outcome with the pure rules of domain/redeem.py (state table, choice among
   copies, repeats in a batch) on the locked, current states.
3. Redeem the chosen `asignado` copies and credit their points (store/redeem.redeem with
   `ByCopies`: one statement, the ledger's CTEs, fans locked in pk order).
4. Only when some code had been redeemed before this call: read what those redemptions
   credited (store/redeem.credited_by_redemptions, one statement), for their
   `puntos_acreditados`. It runs after the lock, so it sees the ledger entry of a
   concurrent redemption that the lock waited for.

`puntos_otorgados` is what this call credited (0 for a duplicate); `puntos_acreditados` what
the code's redemption credited when it was applied, whichever call applied it: this one
(then it equals `puntos_otorgados`; also for a text repeated in the batch, whose later
entries are duplicates of the first), or an earlier one (its ledger entry).

Locks are always taken codes first (ascending id), then fans (ascending pk: the ledger's
CTEs lock them in that order), and a sale only locks its fan: the same global order
everywhere, so concurrent batches, single redemptions and sales never deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.codes import code_text
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import (
    Copy,
    Outcome,
    Resumen,
    Step,
    check_batch_size,
    check_length,
    could_exist,
    plan,
    summarize,
)
from loyalty_grpc.store.db import Database
from loyalty_grpc.store.redeem import (
    ByCopies,
    ByText,
    RedeemValues,
    credited_by_redemptions,
    lock_copies,
    redeem,
)
from loyalty_grpc.store.uow import UnitOfWork


@dataclass(frozen=True)
class Redemption:
    """What the POS says about the redemption: its terminal, its time (`ts`, or the server's
    when absent) and the server's time (recorded as `canje_registrado`)."""

    terminal: str | None
    ts: datetime
    now: datetime


@dataclass(frozen=True)
class RedeemResult:
    """A 200 of the single form (estado is always `canjeado`)."""

    codigo: str
    duplicado: bool
    promo: str
    correo: str
    # Credited by this call (0 on a duplicate).
    puntos_otorgados: int
    # Credited by the code's redemption when it was applied, whichever call applied it.
    puntos_acreditados: int


@dataclass(frozen=True)
class CodeResult:
    """One entry of a batch: the normalised text and either the result or the error."""

    codigo: str
    result: RedeemResult | None
    error: CodigoError | None


@dataclass(frozen=True)
class BatchResult:
    resumen: Resumen
    resultados: tuple[CodeResult, ...]


def _values(caller: Caller, redemption: Redemption) -> RedeemValues:
    return RedeemValues(
        programa=caller.programa_id,
        vivo=caller.earns_points,
        clave_id=caller.clave_id,
        terminal=redemption.terminal,
        ts=redemption.ts,
        ahora=redemption.now,
    )


def redeem_code(
    engine: Database, caller: Caller, codigo: str, redemption: Redemption
) -> RedeemResult:
    """The single form: the result, or the code's error raised (404/409)."""
    texto = code_text(codigo)
    check_length(texto, "codigo")
    rows = redeem(engine, _values(caller, redemption), ByText(texto)) if could_exist(texto) else []
    copias = {texto: [Copy(row.copia, row.estado) for row in rows]} if rows else {}
    step = plan([texto], copias)[0]
    failure = step.failure()
    if failure is not None:
        raise failure
    row = rows[0]
    nuevo = step.outcome is Outcome.CANJEADO
    return RedeemResult(
        codigo=texto,
        duplicado=not nuevo,
        promo=row.promo,
        correo=row.correo,
        puntos_otorgados=row.credited,
        puntos_acreditados=(
            row.credited
            if nuevo
            else credited_by_redemptions(engine, caller.programa_id, [row.copia])[row.copia]
        ),
    )


def redeem_codes(
    engine: Database, caller: Caller, texts: Sequence[str], redemption: Redemption
) -> BatchResult:
    """The batch form: every code handled as the single form would, in input order, in one
    transaction. Over MAX_CODIGOS → demasiados_codigos, a text over MAX_CODE_LENGTH →
    codigo_invalido, and nothing is redeemed."""
    check_batch_size(len(texts))
    normalised = [code_text(t) for t in texts]
    for index, texto in enumerate(normalised):
        check_length(texto, "codigos", index)
    with UnitOfWork(engine) as uow:
        outcomes = _redeem(uow, caller, normalised, redemption)
        uow.commit()
    return BatchResult(
        resumen=summarize([step for step, _ in outcomes]),
        resultados=tuple(CodeResult(step.codigo, result, step.error) for step, result in outcomes),
    )


def _redeem(
    uow: UnitOfWork, caller: Caller, texts: list[str], redemption: Redemption
) -> list[tuple[Step, RedeemResult | None]]:
    copias, locked = lock_copies(uow.conn, caller.programa_id, {t for t in texts if could_exist(t)})
    steps = plan(texts, copias)
    chosen = [p.copia for p in steps if p.outcome is Outcome.CANJEADO and p.copia is not None]
    redeemed = redeem(uow.conn, _values(caller, redemption), ByCopies(tuple(chosen)))
    if sorted(r.copia for r in redeemed if r.estado is EstadoCodigo.ASIGNADO) != sorted(chosen):
        # the copies are locked: cannot happen
        raise LoyaltyError(CodigoError.ERROR_INTERNO, "canje: el estado cambió bajo bloqueo")
    # What this call credits, by copy: the copies it redeems.
    credited = {r.copia: r.credited for r in redeemed}
    before = {
        p.copia
        for p in steps
        if p.outcome is Outcome.DUPLICADO and p.copia is not None and p.copia not in credited
    }
    credited |= credited_by_redemptions(uow.conn, caller.programa_id, before)
    outcomes: list[tuple[Step, RedeemResult | None]] = []
    for step in steps:
        result = None
        if step.error is None and step.copia is not None:
            row = locked[step.copia]
            nuevo = step.outcome is Outcome.CANJEADO
            result = RedeemResult(
                codigo=step.codigo,
                duplicado=not nuevo,
                promo=row.promo,
                correo=row.correo,
                puntos_otorgados=credited[row.id] if nuevo else 0,
                puntos_acreditados=credited[row.id],
            )
        outcomes.append((step, result))
    return outcomes
