"""A sale (`tx`) as ONE call, `loyalty_tx` (migration 0014): find the fan (the readings of
store/fan_lookup.py, by form), insert the sale under the folio the caller took
(store/folios.py) unless its id_externo is known (`ON CONFLICT DO NOTHING` on the unique
(program, mode, id_externo) index), credit its points through the ledger rule for one fan
(`loyalty_move1`, migration 0017; store/ledger.py) with its wallet outbox row; one round
trip, atomic (store/autocommit.py). Every table it names is read or written by the
program, and the fan's rows by (programa_id, pk); on Citus the call runs on the node of the
program's shard.

An identical sale running concurrently makes the INSERT wait for it to commit, and then do
nothing: so 50 identical calls credit once. The answer then comes from `ORIGINAL` (a second
statement, only on that path; the folio this call took stays unused): the first sale's
folio, fan, amount and points (what it credited when it was applied: `ventas.puntos`,
never changed, not even by a void), and the fan's current balance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from loyalty_grpc.domain.fan_ref import FanRef
from loyalty_grpc.store.autocommit import fetch_one
from loyalty_grpc.store.fan_lookup import lookup_params

# The sale is the function `loyalty_tx` (migration 0014): a statement with INSERT CTEs is
# never router-planned by Citus, so the steps are simple statements in a function Citus
# runs on the node of the program's shard; called in the one form it delegates.
SALE = """
SELECT * FROM loyalty_tx(%(programa)s, %(forma)s, %(valor)s, %(crudo)s,
                         CAST(%(folio)s AS integer), %(modo)s, %(id_externo)s,
                         CAST(%(centavos)s AS bigint), %(moneda)s, %(terminal)s, %(sitio)s,
                         CAST(%(ts)s AS timestamptz), CAST(%(puntos)s AS bigint),
                         CAST(%(clave_id)s AS bigint))
"""

ORIGINAL = """
SELECT v.id, v.fan_pk, v.importe_centavos, v.puntos, f.puntos
FROM ventas v JOIN fans f ON f.programa_id = v.programa_id AND f.pk = v.fan_pk
WHERE v.programa_id = %(programa)s AND v.modo = %(modo)s AND v.id_externo = %(id_externo)s
"""


@dataclass(frozen=True)
class SaleRow:
    fan_pk: int
    fan_id: str
    correo: str
    # The new sale's folio; None when the id_externo was known (nothing written).
    folio: int | None
    # The fan's balance after the sale (before it, for a known id_externo).
    saldo: int


@dataclass(frozen=True)
class OriginalSale:
    folio: int
    fan_pk: int
    centavos: int
    # The points the sale credited when it was applied (0 for a test sale); a later void
    # does not change them (it is a ledger entry of its own).
    puntos: int
    saldo: int  # the fan's balance now


@dataclass(frozen=True)
class SaleValues:
    # The folio the sale gets when it is new (store/folios.py).
    folio: int
    programa: str
    modo: str
    id_externo: str
    centavos: int
    moneda: str
    terminal: str | None
    sitio: str | None
    ts: datetime
    puntos: int
    clave_id: int


def insert_sale(engine: Engine, sale: SaleValues, ref: FanRef) -> SaleRow | None:
    """The sale for the active fan `ref` names; None when no such fan (nothing written)."""
    row = fetch_one(
        engine,
        SALE,
        {
            **lookup_params(sale.programa, ref),
            "forma": ref.forma.value,
            "folio": sale.folio,
            "modo": sale.modo,
            "id_externo": sale.id_externo,
            "centavos": sale.centavos,
            "moneda": sale.moneda,
            "terminal": sale.terminal,
            "sitio": sale.sitio,
            "ts": sale.ts,
            "puntos": sale.puntos,
            "clave_id": sale.clave_id,
        },
    )
    if row is None:
        return None
    fan_pk, fan_id, correo, puntos, folio, saldo = row
    return SaleRow(
        fan_pk=fan_pk,
        fan_id=fan_id,
        correo=correo,
        folio=folio,
        saldo=int(puntos if saldo is None else saldo),
    )


def original_sale(engine: Engine, programa: str, modo: str, id_externo: str) -> OriginalSale:
    row = fetch_one(
        engine, ORIGINAL, {"programa": programa, "modo": modo, "id_externo": id_externo}
    )
    if row is None:  # the conflicting sale is committed: it cannot be gone
        raise LookupError("the sale with this id_externo vanished")
    folio, fan_pk, centavos, puntos, saldo = row
    return OriginalSale(
        folio=folio, fan_pk=fan_pk, centavos=int(centavos), puntos=int(puntos), saldo=int(saldo)
    )
