"""`redeem`: redeem one coupon code or a batch, in the calling key's program.

The single form is one statement (store/redeem.py), the cashier's hot path. A batch is one
transaction: the redemptions and their points commit together or not at all. Three steps,
concurrency left to PostgreSQL's row locks:

1. Lock every copy of every requested text (`SELECT … ORDER BY id FOR NO KEY UPDATE`, one
   round trip; it also reads each copy's promotion and fan). A concurrent redemption of the
   same code waits here and then reads the state the other committed, so of 20 concurrent
   redemptions one is `duplicado: false` and one credits.
2. Decide every outcome with the pure rules of domain/redeem.py (state table, choice among
   copies, repeats in a batch) on the locked, current states.
3. Redeem the chosen `asignado` copies (one UPDATE) and credit their points through
   store/ledger.move_many (`Motivo.CANJE`, `codigo_id`; one statement, fans locked in pk
   order).
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

from sqlalchemy import Engine, any_, bindparam, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.codes import code_text
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import (
    Copia,
    Desenlace,
    Paso,
    Resumen,
    check_batch_size,
    check_length,
    could_exist,
    plan,
    summarize,
)
from loyalty_grpc.store.ledger import Motivo, Move, move_many
from loyalty_grpc.store.redeem import (
    RedeemValues,
    credited_by_redemption,
    credited_by_redemptions,
    redeem_one,
)
from loyalty_grpc.store.tables import codigos, fans, promos
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


@dataclass(frozen=True)
class _Row:
    id: int
    fan_pk: int | None
    promo: str
    puntos_canje: int
    correo: str


def redeem_code(
    engine: Engine, caller: Caller, codigo: str, redemption: Redemption
) -> RedeemResult:
    """The single form: the result, or the code's error raised (404/409)."""
    texto = code_text(codigo)
    check_length(texto, "codigo")
    row = (
        redeem_one(
            engine,
            RedeemValues(
                programa=caller.programa_id,
                codigo=texto,
                vivo=caller.earns_points,
                clave_id=caller.clave_id,
                terminal=redemption.terminal,
                ts=redemption.ts,
                ahora=redemption.now,
            ),
        )
        if could_exist(texto)
        else None
    )
    copias = {texto: [Copia(row.copia, row.estado)]} if row is not None else {}
    paso = plan([texto], copias)[0]
    falla = paso.falla()
    if falla is not None:
        raise falla
    assert row is not None
    nuevo = paso.desenlace is Desenlace.CANJEADO
    otorgados = row.puntos_canje if nuevo and caller.earns_points else 0
    return RedeemResult(
        codigo=texto,
        duplicado=not nuevo,
        promo=row.promo,
        correo=row.correo,
        puntos_otorgados=otorgados,
        puntos_acreditados=otorgados if nuevo else credited_by_redemption(engine, row.copia),
    )


def redeem_codes(
    engine: Engine, caller: Caller, texts: Sequence[str], redemption: Redemption
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
        resumen=summarize([paso for paso, _ in outcomes]),
        resultados=tuple(CodeResult(paso.codigo, result, paso.error) for paso, result in outcomes),
    )


def _lock(
    uow: UnitOfWork, programa: str, texts: list[str]
) -> tuple[dict[str, list[Copia]], dict[int, _Row]]:
    """Lock every copy of `texts` in the program, in id order; their current states by text,
    and each copy's promotion and fan by id. The promotion's and fan's fields are scalar
    subqueries so that they are read for the row version the lock returns."""
    conn = uow.conn
    if not texts:
        return {}, {}
    promo = select(promos.c.nombre).where(promos.c.id == codigos.c.promo_id)
    puntos = select(promos.c.puntos_canje).where(promos.c.id == codigos.c.promo_id)
    correo = select(fans.c.correo).where(fans.c.pk == codigos.c.fan_pk)
    rows = conn.execute(
        select(
            codigos.c.id,
            codigos.c.codigo,
            codigos.c.estado,
            codigos.c.fan_pk,
            promo.scalar_subquery().label("promo"),
            puntos.scalar_subquery().label("puntos_canje"),
            correo.scalar_subquery().label("correo"),
        )
        .where(
            codigos.c.programa_id == programa,
            codigos.c.codigo == any_(bindparam("texts", texts, type_=ARRAY(Text))),
        )
        .order_by(codigos.c.id)
        # FOR NO KEY UPDATE: what the redemption's UPDATE needs, without blocking foreign-key
        # checks of rows that merely reference the code (the ledger entry).
        .with_for_update(of=codigos, key_share=True)
    ).all()
    copias: dict[str, list[Copia]] = {}
    details: dict[int, _Row] = {}
    for row in rows:
        copias.setdefault(row.codigo, []).append(Copia(row.id, EstadoCodigo(row.estado)))
        details[row.id] = _Row(
            id=row.id,
            fan_pk=row.fan_pk,
            promo=row.promo,
            puntos_canje=int(row.puntos_canje),
            correo=row.correo or "",
        )
    return copias, details


def _redeem(
    uow: UnitOfWork, caller: Caller, texts: list[str], redemption: Redemption
) -> list[tuple[Paso, RedeemResult | None]]:
    conn = uow.conn
    wanted = sorted({t for t in texts if could_exist(t)})
    copias, rows = _lock(uow, caller.programa_id, wanted)
    pasos = plan(texts, copias)
    redeemed = [
        rows[p.copia] for p in pasos if p.desenlace is Desenlace.CANJEADO and p.copia is not None
    ]
    if redeemed:
        ids = [row.id for row in redeemed]
        done = (
            conn.execute(
                update(codigos)
                .where(
                    codigos.c.id == any_(bindparam("ids", ids, type_=ARRAY(codigos.c.id.type))),
                    codigos.c.estado == EstadoCodigo.ASIGNADO.value,
                )
                .values(
                    estado=EstadoCodigo.CANJEADO.value,
                    canjeado_en=redemption.ts,
                    canje_terminal=redemption.terminal,
                    canje_clave_id=caller.clave_id,
                    canje_registrado=redemption.now,
                )
                .returning(codigos.c.id)
            )
            .scalars()
            .all()
        )
        if sorted(done) != sorted(ids):  # the rows are locked: cannot happen
            raise LoyaltyError(CodigoError.ERROR_INTERNO, "canje: el estado cambió bajo bloqueo")
    live = caller.earns_points
    # What this call credits, by copy: the copies it redeems.
    credited = {
        row.id: row.puntos_canje if live and row.fan_pk is not None else 0 for row in redeemed
    }
    if live:
        move_many(
            conn,
            [
                Move(row.fan_pk, credited[row.id], codigo_id=row.id)
                for row in redeemed
                if credited[row.id] and row.fan_pk is not None
            ],
            Motivo.CANJE,
        )
    before = {
        p.copia
        for p in pasos
        if p.desenlace is Desenlace.DUPLICADO and p.copia is not None and p.copia not in credited
    }
    credited |= credited_by_redemptions(conn, before)
    outcomes: list[tuple[Paso, RedeemResult | None]] = []
    for paso in pasos:
        result = None
        if paso.error is None and paso.copia is not None:
            row = rows[paso.copia]
            nuevo = paso.desenlace is Desenlace.CANJEADO
            result = RedeemResult(
                codigo=paso.codigo,
                duplicado=not nuevo,
                promo=row.promo,
                correo=row.correo,
                puntos_otorgados=credited[row.id] if nuevo else 0,
                puntos_acreditados=credited[row.id],
            )
        outcomes.append((paso, result))
    return outcomes
