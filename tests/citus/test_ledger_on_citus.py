"""A fan's ledger on Citus (store/points.py; proto GetLedger: "oldest first, with the
running balance"). Ids are unique on the cluster but do not grow within a program: an entry
written through the coordinator (an adjustment) takes an id of the coordinator's range, one
written by a delegated call (a sale, a redemption) an id of its node's range, and after the
program's shard moves, of the new node's. So the listing, its running balance and the entry
an adjustment returns go by (creado, id), as CREDITED's latest entry does
(store/redeem.py)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime

from sqlalchemy import Engine

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.services.backoffice import fans, keys, programs
from loyalty_grpc.services.backoffice import points as points_admin
from loyalty_grpc.services.backoffice.keys import authenticate
from loyalty_grpc.services.pos.sales import NewSale, register_sale
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.ledger import Motivo
from loyalty_grpc.store.uow import run_in_uow, snapshot
from tests.citus.cluster import HOST, Cluster, connect
from tests.citus.test_cluster import shard_of

P = "mudanza"
FAN = "MU0001"


def _move_to(url: str, port: int) -> None:
    """Move the program's group of co-located shards to the worker at `port`, writes
    blocked during the copy."""
    with connect(url) as conn:
        shard = shard_of(conn, "fans", P)
        conn.execute("CALL citus_cleanup_orphaned_resources()")
        conn.execute(
            "SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, "
            "shard_transfer_mode => 'block_writes')",
            (shard.id, HOST, shard.port, HOST, port),
        )
        assert shard_of(conn, "fans", P).port == port


def _sale(engine: Engine, folios: Folios, caller: Caller) -> None:
    register_sale(
        engine,
        folios,
        caller,
        NewSale(
            id_externo=uuid.uuid4().hex,
            fan=parse_fan_ref(FAN),
            centavos=12_345,
            moneda="MXN",
            ts=datetime.now(UTC),
        ),
    )


def test_the_ledger_keeps_its_order_across_a_shard_move(
    citus_cluster: Cluster, db_url: str, engine: Engine, folios: Folios
) -> None:
    """A sale (its entry written on the shard's node, by the delegated `loyalty_tx`), an
    adjustment (written through the coordinator), the shard moved to the other worker, a
    sale and an adjustment again: the ids do not follow that order (what the listing must
    not go by), the ledger lists the four in the order they were made with the running
    balance of that order, and each adjustment returned its own entry."""
    run_in_uow(engine, programs.upsert_program, P, "Club Mudanza", "0.1")
    key = run_in_uow(engine, keys.issue_key, P, "Caja", "vivo", ["tx:escribir"]).clave
    caller = authenticate(engine, key)
    assert caller is not None
    run_in_uow(
        engine, fans.register_fan, P, FAN, nombre="Ana", correo="mu@example.com", socio_desde=2020
    )
    ports = [worker.port for worker in citus_cluster.workers]
    with connect(db_url) as conn:
        start = shard_of(conn, "fans", P).port
    adjusted = []
    _sale(engine, folios, caller)
    adjusted.append(run_in_uow(engine, points_admin.adjust_points, P, FAN, 5, "antes"))
    _move_to(db_url, next(port for port in ports if port != start))
    _sale(engine, folios, caller)
    adjusted.append(run_in_uow(engine, points_admin.adjust_points, P, FAN, -1, "después"))

    info, entries = run_in_uow(snapshot(engine), points_admin.get_ledger, P, FAN)
    assert [e.motivo for e in entries] == [Motivo.VENTA, Motivo.AJUSTE] * 2
    assert [e.id for e in entries] != sorted(e.id for e in entries)
    assert [entries[1], entries[3]] == adjusted
    assert [e.saldo for e in entries] == list(itertools.accumulate(e.puntos for e in entries))
    assert info.puntos == entries[-1].saldo == sum(e.puntos for e in entries)
