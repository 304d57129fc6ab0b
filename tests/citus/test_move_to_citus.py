"""Moving an installation onto Citus (docs/citus.md "Moving onto Citus"): a database that
served on one PostgreSQL, with programs, keys, fans, codes and sales, gets the citus
extension and its workers, and `loyalty migrate` distributes it. Every row is still there,
now on the workers; the ledger still adds up; sales go on, a retried one still answered as
the first."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from sqlalchemy import Engine, select

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.sales import NewSale, register_sale
from loyalty_grpc.store import distribution, migrate, tables
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL, claves
from loyalty_grpc.store.uow import run_in_uow
from tests.citus.cluster import Cluster

PROGRAMS = ["norte", "sur", "este"]
FANS = [f"MV{i:02}" for i in range(1, 9)]
TASA = Decimal("0.1")


def _fixture() -> str:
    return json.dumps(
        {
            "programas": [
                {
                    "id": p,
                    "nombre": p.title(),
                    "tasa_puntos": str(TASA),
                    "claves": [
                        {
                            "clave": "lp_vivo_" + secrets.token_hex(16),
                            "integracion": "Caja",
                            "permisos": ["tx:escribir"],
                        }
                    ],
                    "fans": [
                        {
                            "id": f,
                            "nombre": f,
                            "correo": f"{f.lower()}@{p}.example.com",
                            "socio_desde": 2020,
                            "qr_token": f"qr-{p}-{f}",
                        }
                        for f in FANS
                    ],
                    "promos": [
                        {
                            "nombre": "Promo",
                            "vigencia_fin": "2099-12-31",
                            "codigos": [
                                {"codigo": f"{p}-{i}", "estado": "asignado", "fan": FANS[i % 8]}
                                for i in range(20)
                            ],
                        }
                    ],
                }
                for p in PROGRAMS
            ]
        }
    )


def _callers(engine: Engine) -> list[Caller]:
    with engine.connect() as conn:
        rows = conn.execute(select(claves.c.id, claves.c.programa_id)).all()
    return [
        Caller(
            programa_id=programa,
            programa_nombre=programa.title(),
            clave_id=int(clave_id),
            tasa_puntos=TASA,
            moneda="MXN",
            integracion="Caja",
            modo=Modo.VIVO,
            permisos=frozenset({Permiso.TX_ESCRIBIR}),
        )
        for clave_id, programa in rows
    ]


def _sale(id_externo: str, fan: str) -> NewSale:
    return NewSale(
        id_externo=id_externo,
        fan=parse_fan_ref(fan),
        centavos=10_000,
        moneda="MXN",
        ts=datetime.now(UTC),
    )


def _counts(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            t.name: conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()
            for t in tables.metadata.sorted_tables
        }


def test_an_installation_moves_onto_the_cluster(citus_cluster: Cluster) -> None:
    url = citus_cluster.create_single_node_database("moving")
    try:
        assert migrate.upgrade(url) == migrate.head()
        engine = make_engine(url, pool_size=2)
        try:
            run_in_uow(engine, apply_fixture, _fixture())
            callers = _callers(engine)
            folios = Folios(engine)
            first = {}
            for caller in callers:
                for i, fan in enumerate(FANS):
                    sale = _sale(f"{caller.programa_id}-{i}", fan)
                    first[sale.id_externo] = register_sale(engine, folios, caller, sale)
        finally:
            engine.dispose()
        before = _counts(url)
        assert before["ventas"] == (len(PROGRAMS) * len(FANS),)

        citus_cluster.join("moving")
        assert migrate.upgrade(url) == migrate.head()  # distributes, copying the rows

        assert _counts(url) == before
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(LEDGER_MISMATCH_SQL).fetchall() == []
            placed = {
                r[0]
                for r in conn.execute("SELECT logicalrelid::regclass::text FROM pg_dist_partition")
            }
            # The program's rows left the coordinator: every shard of fans is on a worker.
            groups = conn.execute(
                "SELECT DISTINCT n.groupid FROM pg_dist_shard s "
                "JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) "
                "WHERE s.logicalrelid = 'fans'::regclass"
            ).fetchall()
        assert placed == {t.name for t in tables.metadata.sorted_tables}
        assert 0 not in {g for (g,) in groups}
        assert len(groups) == 2

        engine = make_engine(url, pool_size=2)
        try:
            folios = Folios(engine)
            for caller in callers:
                retried = _sale(f"{caller.programa_id}-0", FANS[0])
                again = register_sale(engine, folios, caller, retried)
                assert again.folio == first[retried.id_externo].folio
                assert register_sale(
                    engine, folios, caller, _sale(f"{caller.programa_id}-new", FANS[1])
                ).folio not in {r.folio for r in first.values()}
        finally:
            engine.dispose()
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(LEDGER_MISMATCH_SQL).fetchall() == []
        assert placed >= distribution.REFERENCE
    finally:
        citus_cluster.drop_database("moving")
