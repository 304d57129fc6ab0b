"""Redeeming coupon codes: one function, `loyalty_redeem` (migration 0014), for both forms
of `redeem`, so that a redemption writes the same columns whichever form asks for it (the
code's state, the POS's time, the terminal, the key, the server's time) and credits through
the ledger rule (`loyalty_move1` for the single form, `loyalty_move` for a batch: migration
0017, store/ledger.py) in the same round trip.

What is redeemed (`Choice`):
- `ByText`, the single form, the cashier's hot path: the statement locks every copy of the
  text in the program (in id order, as every redemption does), chooses the copy by the
  domain's order of preference (domain/redeem.py PREFERENCIA, then the oldest) and redeems
  it if it is `asignado`: one autocommit round trip (store/autocommit.py), atomic.
- `ByCopies`, a batch: the copies the domain's rules chose (domain/redeem.plan) after
  `lock_copies` locked every copy of the batch's texts in the caller's transaction; the
  statement redeems those still `asignado` (all of them: they are locked).

Either way the answer is, per chosen copy, its state before the statement, its promotion's
name and points, its fan's e-mail and what the statement credited.

Every table a redemption names is read or written by the program (`%(programa)s`), and
codes join their promotion and fan on (programa_id, key): one program's rows, on a cluster
sharded by program one shard.

A concurrent redemption of the same text waits on the copies' row locks and then reads the
state the other one committed, so of 20 concurrent redemptions one redeems and credits.
Locks are taken codes first (ascending id), then fans (the balance UPDATE; several fans in
pk order), the order every other redemption and sale keeps.

What a redemption credited when it was applied (`puntos_acreditados`, on first answers and
duplicates alike) is in the ledger: its `canje` entry, not the promotion's `puntos_canje`
now (the back office may have changed it since). A first redemption knows it from the
statement. A duplicate reads it with `credited_by_redemptions`, a statement of its own run
after the redemption's: a concurrent redemption that this one waited for committed its
ledger entry after this statement's snapshot was taken, so a subquery in the redemption
would not see it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import PREFERENCIA, Copy
from loyalty_grpc.store.autocommit import fetch_all
from loyalty_grpc.store.ledger import Motivo
from loyalty_grpc.store.tables import codigos, fans, promos


@dataclass(frozen=True)
class ByText:
    """The single form: the text's preferred copy, chosen in the statement."""

    codigo: str  # normalised (domain/codes.code_text)


@dataclass(frozen=True)
class ByCopies:
    """A batch: these copies (ids), already locked in the caller's transaction."""

    ids: tuple[int, ...]


Choice = ByText | ByCopies

# Both forms are the function `loyalty_redeem` (migration 0014), called in the one form Citus
# delegates to the node of the program's shard: `p_codigo` for `ByText` (autocommit), `p_ids`
# for `ByCopies` (in the batch's transaction: registered with force_delegation,
# store/distribution.py).
REDEEM = """
SELECT * FROM loyalty_redeem(%(programa)s, %(codigo)s, CAST(%(ids)s AS bigint[]),
                             CAST(%(preferencia)s AS text[]), CAST(%(ts)s AS timestamptz),
                             %(terminal)s, CAST(%(clave_id)s AS bigint),
                             CAST(%(ahora)s AS timestamptz), %(vivo)s)
"""


@dataclass(frozen=True)
class RedeemRow:
    """A copy the redemption acted on, as it was before: its id, state, promotion's name
    and points per redemption, its fan's e-mail ("" when it has no fan), and what this
    redemption credited (0 unless it redeemed the copy with a live key)."""

    copia: int
    estado: EstadoCodigo
    promo: str
    puntos_canje: int
    correo: str
    credited: int


@dataclass(frozen=True)
class RedeemValues:
    programa: str
    vivo: bool  # a live key: the redemption credits the promotion's points
    clave_id: int
    terminal: str | None
    ts: datetime  # the POS's time of the redemption
    ahora: datetime  # when the server recorded it


Db = Engine | Connection


def _rows(db: Db, sql: str, params: Mapping[str, object]) -> Sequence[Sequence[Any]]:
    """The rows of one statement: on an Engine in autocommit (one round trip), on a
    Connection in its transaction."""
    if isinstance(db, Connection):
        return db.exec_driver_sql(sql, dict(params)).all()
    return fetch_all(db, sql, params)


def redeem(db: Db, values: RedeemValues, choice: Choice) -> list[RedeemRow]:
    """Redeem what `choice` names (module doc): one row per chosen copy (none
    when the program has no copy of the text, or `ByCopies` is empty). The single form
    (`ByText`) runs on an Engine, a batch (`ByCopies`) in the caller's transaction."""
    params: dict[str, object] = {
        "programa": values.programa,
        "ts": values.ts,
        "terminal": values.terminal,
        "clave_id": values.clave_id,
        "ahora": values.ahora,
        "vivo": values.vivo,
        "preferencia": list(PREFERENCIA),
    }
    if isinstance(choice, ByText):
        params |= {"codigo": choice.codigo, "ids": None}
    elif choice.ids:
        params |= {"codigo": None, "ids": list(choice.ids)}
    else:
        return []
    return [
        RedeemRow(
            copia=int(copia),
            estado=EstadoCodigo(estado),
            promo=promo,
            puntos_canje=int(puntos_canje),
            correo=correo or "",
            credited=int(credited),
        )
        for copia, estado, promo, puntos_canje, correo, credited in _rows(db, REDEEM, params)
    ]


@dataclass(frozen=True)
class Locked:
    """A copy `lock_copies` locked: its fan, promotion's name and points, fan's e-mail."""

    id: int
    fan_pk: int | None
    promo: str
    puntos_canje: int
    correo: str


def lock_copies(
    conn: Connection, programa: str, texts: Collection[str]
) -> tuple[dict[str, list[Copy]], dict[int, Locked]]:
    """A batch's first step: lock every copy of `texts` in the program, in id order, in the
    caller's transaction (one round trip). Their current states by text, and each copy's
    promotion and fan by id. The promotion's and fan's fields are scalar subqueries (on
    (programa_id, key), like every join of a redemption) so that they are read for the row
    version the lock returns."""
    if not texts:
        return {}, {}
    # The program named in each subquery too: Citus routes a SELECT … FOR UPDATE only
    # when every table it reads is pinned to the one shard.
    of_promo = (promos.c.programa_id == programa, promos.c.id == codigos.c.promo_id)
    promo = select(promos.c.nombre).where(*of_promo)
    puntos = select(promos.c.puntos_canje).where(*of_promo)
    correo = select(fans.c.correo).where(
        fans.c.programa_id == programa, fans.c.pk == codigos.c.fan_pk
    )
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
            codigos.c.codigo == any_(bindparam("texts", sorted(texts), type_=ARRAY(Text))),
        )
        .order_by(codigos.c.id)
        # FOR NO KEY UPDATE: what the redemption's UPDATE needs, without blocking foreign-key
        # checks of rows that merely reference the code (the ledger entry).
        .with_for_update(of=codigos, key_share=True)
    ).all()
    copias: dict[str, list[Copy]] = {}
    locked: dict[int, Locked] = {}
    for row in rows:
        copias.setdefault(row.codigo, []).append(Copy(row.id, EstadoCodigo(row.estado)))
        locked[row.id] = Locked(
            id=row.id,
            fan_pk=row.fan_pk,
            promo=row.promo,
            puntos_canje=int(row.puntos_canje),
            correo=row.correo or "",
        )
    return copias, locked


# What the redemptions of the program's copies %(ids)s credited: each copy's latest `canje`
# ledger entry (0 when it has none: redeemed with a test key, a promotion worth 0 points, a
# code recorded as `canjeado` by a fixture). The entry belongs to the code's fan (a
# redemption credits the code's fan, and a redeemed code keeps it; a fixture that moves a
# redeemed code to another fan makes it 0), so the fan's ledger index
# (ix_movimientos_programa_id_fan_pk_id) finds it among that fan's entries, with no index of
# its own to write on every redemption. Its cost grows with the fan's ledger (EXPLAIN
# ANALYZE: 0.2-0.3 ms for a fan with 2,500 entries), on the duplicate path only. The latest
# is by (creado, id): on a cluster ids are unique but do not grow within a shard (each node
# hands out a range of its own, and a shard may move), so the entry's time orders first.
# The subquery names the program itself: correlated on c.programa_id only, Citus sends the
# statement to every shard (EXPLAIN: one task per shard), not to the program's.
CREDITED = f"""
SELECT c.id, coalesce((
  SELECT m.puntos FROM movimientos m
  WHERE m.programa_id = %(programa)s AND m.fan_pk = c.fan_pk AND m.codigo_id = c.id
    AND m.motivo = '{Motivo.CANJE.value}'
  ORDER BY m.creado DESC, m.id DESC LIMIT 1), 0)
FROM codigos c
WHERE c.programa_id = %(programa)s AND c.id = ANY(CAST(%(ids)s AS bigint[]))
"""  # noqa: S608 (only constants are interpolated)


def credited_by_redemptions(db: Db, programa: str, copias: Collection[int]) -> dict[int, int]:
    """What the redemptions of the program's copies credited when they were applied, by
    copy id (one statement: autocommit on an Engine, in the transaction on a Connection)."""
    if not copias:
        return {}
    rows = _rows(db, CREDITED, {"programa": programa, "ids": sorted(copias)})
    return {int(copia): int(puntos) for copia, puntos in rows}
