"""`apply`: load a fixture (DESIGN.md §4, parsed by domain.fixture) into the store.

One transaction for the whole fixture: the caller's (apply_fixture does not commit).
Entries are upserted by their natural keys: program by `id`, key by its hash, fan by
(program, Fan ID), promotion by (program, lower(nombre)), code by (promotion, code). Only
rows whose values differ are written, so applying the same fixture twice changes nothing
(not even the roster change columns). A fan's `puntos` is reached by one ledger
adjustment of the difference.

A conflict with rows already in the database (an e-mail or QR token another fan of the
program uses, by the rule of fans.py's `find_taken`; a key registered to another
program; a code's fan nobody knows; a key not stored yet that is too weak to be created,
by domain/keys.py `require_strong`) raises before anything is committed, so a failed
apply leaves the database as it was.

Applies are serialised by an advisory lock; rows about to be compared are read FOR
UPDATE, so a sale running at the same time cannot slip between a balance read and its
adjustment. The statements are store/fixtures.py's; this module holds the validation, the
order of the steps, what counts as a change and the counting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fixture import (
    ClaveFixture,
    CodigoFixture,
    ProgramaFixture,
    parse_fixture,
)
from loyalty_grpc.domain.keys import key_hash, require_strong, suffix
from loyalty_grpc.domain.permissions import sorted_names
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan
from loyalty_grpc.services.backoffice.fans import FanClaim, find_taken
from loyalty_grpc.store import fixtures as fixtures_store
from loyalty_grpc.store.fixtures import CodigoRow, Entidad, StoredRow
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.uow import UnitOfWork

ENTIDADES = ("programas", "claves", "fans", "promos", "codigos", "ajustes")
_NOTA = "fixture"


@dataclass(frozen=True)
class ApplyCount:
    """What `apply` did to one kind of entry. For `ajustes`: `creados` is the number of
    ledger adjustments written, `sin_cambios` the fans whose balance already matched."""

    entidad: str
    creados: int
    actualizados: int
    sin_cambios: int


def apply_fixture(uow: UnitOfWork, document: str) -> list[ApplyCount]:
    """Validate the whole fixture, then apply it in the caller's transaction (which it
    does not commit). Returns one count per entity, in the order of `ENTIDADES`."""
    fixture = parse_fixture(document)
    tally = {entidad: _Tally() for entidad in ENTIDADES}
    fixtures_store.lock_applies(uow.conn)
    now = fixtures_store.database_now(uow.conn)
    _apply_programas(uow, fixture.programas, tally["programas"])
    _apply_claves(uow, fixture.programas, tally["claves"])
    for programa in fixture.programas:
        fan_pks, balances = _apply_fans(uow, programa, now, tally["fans"])
        promo_ids = _apply_promos(uow, programa, tally["promos"])
        _apply_codigos(
            uow,
            programa,
            promo_ids=promo_ids,
            fan_pks=fan_pks,
            now=now,
            tally=tally["codigos"],
        )
        _apply_ajustes(uow, programa, fan_pks, balances, tally["ajustes"])
    return [
        ApplyCount(entidad, t.creados, t.actualizados, t.sin_cambios)
        for entidad, t in tally.items()
    ]


@dataclass
class _Tally:
    creados: int = 0
    actualizados: int = 0
    sin_cambios: int = 0


class _Batch:
    """The writes of one entity: each fixture entry is filed as new (no row yet), changed
    (some value differs from its row) or unchanged; then the new rows are inserted in one
    statement and the changed ones updated by primary key in one executemany
    (`store.fixtures.write_rows`)."""

    def __init__(self, entidad: Entidad, programa_id: str | None = None) -> None:
        self.entidad = entidad
        self.programa_id = programa_id  # the program of its rows (fans, promos, codigos)
        self.new: list[dict[str, Any]] = []
        self.changed: list[tuple[StoredRow, dict[str, Any]]] = []
        self.unchanged = 0

    def add(self, row: StoredRow | None, values: dict[str, Any], identity: dict[str, Any]) -> None:
        """`values`: the columns the fixture sets; `identity`: the natural key and the
        columns only set on insert."""
        if row is None:
            self.new.append({**identity, **values})
        elif any(getattr(row, name) != value for name, value in values.items()):
            self.changed.append((row, values))
        else:
            self.unchanged += 1

    def write(self, uow: UnitOfWork, tally: _Tally, key: str | None = None) -> dict[Any, int]:
        """Returns {key: primary key} of the inserted rows when `key` (a column) is given."""
        created = fixtures_store.write_rows(
            uow.conn, self.entidad, self.new, self.changed, programa_id=self.programa_id, key=key
        )
        tally.creados += len(self.new)
        tally.actualizados += len(self.changed)
        tally.sin_cambios += self.unchanged
        return created


# --- one function per entity --------------------------------------------------------------
# Each reads the rows the fixture names (FOR UPDATE), checks conflicts, then writes a batch.


def _apply_programas(uow: UnitOfWork, wanted: Sequence[ProgramaFixture], tally: _Tally) -> None:
    existing = fixtures_store.programas_for_update(uow.conn, (p.id for p in wanted))
    batch = _Batch("programas")
    for p in wanted:
        batch.add(
            existing.get(p.id),
            {"nombre": p.nombre, "tasa_puntos": p.tasa_puntos, "qr_url": p.qr_url},
            {"id": p.id},
        )
    batch.write(uow, tally)


def _apply_claves(uow: UnitOfWork, wanted: Sequence[ProgramaFixture], tally: _Tally) -> None:
    entries: dict[bytes, tuple[str, ClaveFixture]] = {
        key_hash(c.clave): (p.id, c) for p in wanted for c in p.claves
    }
    existing = fixtures_store.claves_for_update(uow.conn, entries)
    batch = _Batch("claves")
    for digest, (programa_id, c) in entries.items():
        row = existing.get(digest)
        if row is not None and row.programa_id != programa_id:
            raise LoyaltyError(
                CodigoError.FIXTURE_INVALIDO,
                f"{c.ruta}.clave: ya está registrada en otro programa ({row.programa_id})",
            )
        if row is None:  # created now: it must be strong (a stored one keeps working)
            try:
                require_strong(c.clave)
            except LoyaltyError as exc:
                raise LoyaltyError(exc.codigo, f"{c.ruta}.clave: {exc.detalle}") from None
        permisos = sorted_names(c.permisos)
        if row is not None and set(row.permisos) == set(permisos):
            permisos = list(row.permisos)  # the same set in another order is no change
        # `revocada` is not a fixture field: a revoked key stays revoked.
        batch.add(
            row,
            {"integracion": c.integracion, "permisos": permisos},
            {
                "programa_id": programa_id,
                "hash": digest,
                "modo": c.modo.value,
                "sufijo": suffix(c.clave),
            },
        )
    batch.write(uow, tally)


def _apply_fans(
    uow: UnitOfWork, programa: ProgramaFixture, now: datetime, tally: _Tally
) -> tuple[dict[str, int], dict[str, int]]:
    """Returns the pk of every fan of the fixture and its balance before the apply (by
    Fan ID; new fans have no balance)."""
    wanted = programa.fans
    if not wanted:
        return {}, {}
    _check_free(uow, programa)
    existing = fixtures_store.fans_for_update(uow.conn, programa.id, (f.fan_id for f in wanted))
    batch = _Batch("fans", programa.id)
    for f in wanted:
        row = existing.get(f.fan_id)
        baja_en: datetime | None = None
        if f.estado is EstadoFan.BAJA:
            # Already baja: it keeps the moment it left.
            baja_en = row.baja_en if row is not None and row.baja_en is not None else now
        batch.add(
            row,
            {
                "nombre": f.nombre,
                "correo": f.correo,
                "socio_desde": f.socio_desde,
                "temporadas": f.temporadas,
                "qr_token": f.qr_token,
                "estado": f.estado.value,
                "baja_en": baja_en,
                "baja_motivo": f.baja_motivo,
            },
            {"programa_id": programa.id, "fan_id": f.fan_id},
        )
    pks = {fan_id: int(row.pk) for fan_id, row in existing.items()}
    pks.update(batch.write(uow, tally, key="fan_id"))
    balances = {fan_id: int(row.puntos) for fan_id, row in existing.items()}
    return pks, balances


def _apply_promos(uow: UnitOfWork, programa: ProgramaFixture, tally: _Tally) -> dict[str, int]:
    """Returns the id of every promotion of the fixture, by lower-case name."""
    wanted = programa.promos
    if not wanted:
        return {}
    existing = fixtures_store.promos_for_update(
        uow.conn, programa.id, (p.nombre.lower() for p in wanted)
    )
    batch = _Batch("promos", programa.id)
    for p in wanted:
        batch.add(
            existing.get(p.nombre.lower()),
            {
                "nombre": p.nombre,
                "descripcion": p.descripcion,
                "estado": p.estado.value,
                "vigencia_fin": p.vigencia_fin,
                "puntos_canje": p.puntos_canje,
            },
            {"programa_id": programa.id},
        )
    ids = {key: int(row.id) for key, row in existing.items()}
    created = batch.write(uow, tally, key="nombre")
    ids.update({name.lower(): promo_id for name, promo_id in created.items()})
    return ids


def _apply_codigos(
    uow: UnitOfWork,
    programa: ProgramaFixture,
    *,
    promo_ids: Mapping[str, int],
    fan_pks: Mapping[str, int],
    now: datetime,
    tally: _Tally,
) -> None:
    fan_pks = {**fan_pks, **_fans_outside(uow, programa, fan_pks)}
    for promo in programa.promos:
        if not promo.codigos:
            continue
        promo_id = promo_ids[promo.nombre.lower()]
        existing = fixtures_store.codigos_for_update(
            uow.conn, programa.id, promo_id, (c.codigo for c in promo.codigos)
        )
        batch = _Batch("codigos", programa.id)
        for c in promo.codigos:
            row = existing.get(c.codigo)
            fan_pk = fan_pks[c.fan] if c.fan is not None else None
            if row is not None and (row.estado, row.fan_pk) == (c.estado.value, fan_pk):
                batch.unchanged += 1  # same state, same fan: its timestamps stay too
                continue
            batch.add(
                row,
                _code_state(c, fan_pk, row, now),
                {"promo_id": promo_id, "programa_id": programa.id, "codigo": c.codigo},
            )
        batch.write(uow, tally)


def _apply_ajustes(
    uow: UnitOfWork,
    programa: ProgramaFixture,
    fan_pks: Mapping[str, int],
    balances: Mapping[str, int],
    tally: _Tally,
) -> None:
    """One ledger adjustment per fan of the program whose balance is not the fixture's
    `puntos`."""
    for f in programa.fans:
        difference = f.puntos - balances.get(f.fan_id, 0)
        if difference:
            move_points(
                uow.conn, programa.id, fan_pks[f.fan_id], difference, Motivo.AJUSTE, nota=_NOTA
            )
            tally.creados += 1
        else:
            tally.sin_cambios += 1


# --- helpers ------------------------------------------------------------------------------


def _check_free(uow: UnitOfWork, programa: ProgramaFixture) -> None:
    """An e-mail or QR token of a fixture fan that another fan of the program holds is a
    conflict (fans.py's rule, one query for the whole program). Values are compared as
    the database holds them before the apply, so handing a value from one fan to another
    takes two applies."""
    by_id = {f.fan_id: f for f in programa.fans}
    taken = find_taken(
        uow, programa.id, [FanClaim(f.fan_id, f.correo, f.qr_token) for f in programa.fans]
    )
    if taken is not None:
        f = by_id[taken.claim.fan_id]
        raise LoyaltyError(
            taken.codigo,
            f"{f.ruta}.{taken.campo}: ya lo usa otro fan del programa {programa.id} "
            f"({taken.holder})",
        )


def _fans_outside(
    uow: UnitOfWork, programa: ProgramaFixture, in_fixture: Mapping[str, int]
) -> dict[str, int]:
    """The pks of the fans the program's codes name that the fixture does not list; a fan
    that is nowhere is fixture_invalido naming the (first) code."""
    refs: dict[str, CodigoFixture] = {}
    for promo in programa.promos:
        for c in promo.codigos:
            if c.fan is not None and c.fan not in in_fixture:
                refs.setdefault(c.fan, c)
    if not refs:
        return {}
    found = fixtures_store.fan_pks(uow.conn, programa.id, refs)
    for fan_id, c in refs.items():
        if fan_id not in found:
            raise LoyaltyError(
                CodigoError.FIXTURE_INVALIDO,
                f"{c.ruta}.fan: el fan {shown(fan_id)} no está en el fixture ni en "
                f"el programa {programa.id}",
            )
    return found


def _code_state(
    c: CodigoFixture, fan_pk: int | None, row: CodigoRow | None, now: datetime
) -> dict[str, Any]:
    """A code's columns for its fixture state: the moment of a state it already had with
    the same fan is kept, a new one is `now`, those of states it is not in are cleared."""
    same_fan = row is not None and row.fan_pk == fan_pk

    def since(column: str) -> datetime:
        kept: datetime | None = getattr(row, column) if same_fan else None
        return kept if kept is not None else now

    canjeado = c.estado is EstadoCodigo.CANJEADO
    return {
        "estado": c.estado.value,
        "fan_pk": fan_pk,
        "asignado_en": since("asignado_en") if fan_pk is not None else None,
        "canjeado_en": since("canjeado_en") if canjeado else None,
        "canje_terminal": row.canje_terminal if canjeado and same_fan and row else None,
        "liberado_en": since("liberado_en") if c.estado is EstadoCodigo.LIBERADO else None,
    }
