"""The roster feed on Citus (docs/roster.md, docs/citus.md): a page is one call of
`loyalty_roster_page`, which Citus runs on the node of the program's `fans` shard, so that
its snapshot, horizon and positions are that node's transaction ids, the ones the
`fans_cambio` trigger stamps there; and a cursor is bound to that placement (`lugar`), so
that after a shard move it is refused (`cursor_invalido`) and its follower takes one new
snapshot, never skipping a change.

Everything runs through the service's use case (services/pos/roster.read_roster) on an
engine of the coordinator, on a database `loyalty migrate` distributed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.roster_cursor import decode_cursor
from loyalty_grpc.services.backoffice.fans import update_fan
from loyalty_grpc.services.pos.roster import read_roster
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.roster import PAGE
from loyalty_grpc.store.uow import run_in_uow
from tests.citus.cluster import HOST, Cluster, connect
from tests.citus.test_cluster import Shard, shard_of, value
from tests.integration.test_roster_consistency import (
    WRITERS,
    Feed,
    _program,
    _run,
    differences,
    truth,
)

# The out-of-order proof's writes, shortened on the cluster (the plain suite runs 20 s).
SECONDS = float(os.environ.get("ROSTER_CITUS_PROOF_SECONDS", "5"))
PUSHED_DOWN = "pushing down the function call"


@pytest.fixture(scope="module")
def migrated(citus_url: str) -> str:
    assert migrate.upgrade(citus_url) == migrate.head()
    return citus_url


@pytest.fixture(scope="module")
def engine(migrated: str) -> Iterator[Engine]:
    eng = make_engine(migrated, pool_size=WRITERS + 8)
    yield eng
    eng.dispose()


def _params(programa: str, limite: int = 10) -> dict[str, Any]:
    return {"programa": programa, "fase": None, "xid": None, "pk": None, "limite": limite}


def _page_notices(url: str, programa: str) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The page function called as the store calls it (autocommit), with the notices
    Citus sends at debug1."""
    notices: list[str] = []
    with connect(url) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET client_min_messages = debug1")
        rows = conn.execute(PAGE, _params(programa)).fetchall()
    return rows, notices


def _refused(engine: Engine, programa: str, cursor: str) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as refused:
        read_roster(engine, programa, cursor, 7, settle_seconds=0)
    assert refused.value.codigo is CodigoError.CURSOR_INVALIDO
    return refused.value


def _move(url: str, shard: Shard, target_port: int) -> Shard:
    """Move the program's group of co-located shards by logical replication (writes go on
    until the cut-over), first dropping what an earlier move left behind."""
    with connect(url) as conn:
        conn.execute("CALL citus_cleanup_orphaned_resources()")
        conn.execute(
            "SELECT citus_move_shard_placement(%s, %s, %s, %s, %s, "
            "shard_transfer_mode => 'force_logical')",
            (shard.id, HOST, shard.port, HOST, target_port),
        )
        moved = shard_of(conn, "fans", "mueve")
    assert moved == shard._replace(port=target_port)
    return moved


def test_the_page_is_read_on_the_shards_worker(
    citus_cluster: Cluster, migrated: str, engine: Engine
) -> None:
    """The page call is delegated: one task, on the worker of the program's shard (plain
    EXPLAIN: EXPLAIN ANALYZE of a delegated call errors), and Citus says it pushed it down.
    Its `lugar` is the worker's placement identity: the value the same function gives on
    that worker, never the coordinator's system identifier; on the coordinator, where the
    shard is not, it is NULL and no fan is read."""
    program = _program(engine, "sitio")
    with connect(migrated) as conn:
        shard = shard_of(conn, "fans", program.programa)
        dbname = str(conn.info.dbname)
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT * FROM loyalty_roster_page(%s::text, NULL, NULL, NULL, 10)",
                (program.programa,),
                prepare=False,
            ).fetchall()
        )
        coordinators = value(conn, "SELECT system_identifier FROM pg_control_system()")
        with conn.transaction():  # not delegated in a transaction block: runs here
            here = conn.execute(PAGE, _params(program.programa)).fetchall()
    assert "Task Count: 1" in plan, plan
    assert f"port={shard.port}" in plan, plan
    rows, notices = _page_notices(migrated, program.programa)
    assert any(PUSHED_DOWN in n for n in notices), notices
    lugar = rows[0][2]
    assert len(rows) == 1 + 11  # the state, then 10 fans and one more (40 in all)
    worker = next(w for w in citus_cluster.workers if w.port == shard.port)
    with worker.connect(dbname) as on_worker:
        assert value(on_worker, "SELECT loyalty_lugar(%s)", (program.programa,)) == lugar
    assert lugar not in (None, coordinators)
    assert here[0][2] is None
    assert len(here) == 1
    page = read_roster(engine, program.programa, None, 10, settle_seconds=0)
    assert decode_cursor(program.programa, page.siguiente).sistema == lugar & (2**64 - 1)


def test_feed_from_a_snapshot_mirrors_exactly_under_out_of_order_commits(
    engine: Engine,
) -> None:
    """tests/integration/test_roster_consistency.py's proof (the same workload, readers and
    checks, imported), on the cluster: writers commit out of order on the workers while a
    follower pages the feed; its mirror equals the database."""
    outcome = _run(engine, "citus", SECONDS)
    print(
        f"\n{outcome.fans} fans, {outcome.pages} pages ({outcome.live_entries} entries "
        f"while writing), writes {dict(outcome.counts)}; naive variant wrong on "
        f"{len(outcome.naive_diff)} fans"
    )
    assert outcome.counts["held, committed"] > 3
    assert outcome.live_entries > outcome.fans  # the feed kept up, not only at the end
    assert outcome.feed_diff == []


def test_a_shard_move_refuses_old_cursors_and_one_new_snapshot_mirrors_exactly(
    citus_cluster: Cluster, migrated: str, engine: Engine
) -> None:
    """A follower mid-feed; the program's shard moves to the other worker between two of
    its pages (changes before and after the move); its cursor is refused, saying the data
    may have moved; a new snapshot from there mirrors the database exactly. Then the shard
    moves back: cursors of both earlier placements are refused (the first node's counter
    went on meanwhile), and the new placement has an identity of its own."""
    program = _program(engine, "mueve")
    follower = Feed(engine, program.programa)
    follower.drain()
    run_in_uow(engine, update_fan, program.programa, program.fan_ids[0], nombre="Antes")
    assert not follower.step()  # the change before the move is served
    first_cursor = follower.cursor
    assert first_cursor is not None
    run_in_uow(engine, update_fan, program.programa, program.fan_ids[1], nombre="Pendiente")

    with connect(migrated) as conn:
        shard = shard_of(conn, "fans", program.programa)
    other = next(w for w in citus_cluster.workers if w.port != shard.port)
    moved = _move(migrated, shard, other.port)
    run_in_uow(engine, update_fan, program.programa, program.fan_ids[2], nombre="Después")

    refused = _refused(engine, program.programa, first_cursor)
    assert "se movieron de nodo" in refused.detalle
    # What a follower does on cursor_invalido (docs/roster.md step 5): a new snapshot
    # replaces its mirror.
    follower = Feed(engine, program.programa)
    follower.drain()
    assert differences(follower.mirror, truth(engine, program.programa)) == []
    assert follower.mirror[program.fan_ids[1]].nombre == "Pendiente"
    run_in_uow(engine, update_fan, program.programa, program.fan_ids[3], nombre="Nuevo nodo")
    follower.drain()
    assert differences(follower.mirror, truth(engine, program.programa)) == []
    second_cursor = follower.cursor
    assert second_cursor is not None

    _move(migrated, moved, shard.port)
    for old in (first_cursor, second_cursor):
        assert "se movieron de nodo" in _refused(engine, program.programa, old).detalle
    follower = Feed(engine, program.programa)
    follower.drain()
    assert differences(follower.mirror, truth(engine, program.programa)) == []
    assert follower.cursor is not None
    identities = {
        decode_cursor(program.programa, c).sistema
        for c in (first_cursor, second_cursor, follower.cursor)
    }
    assert len(identities) == 3
    # The roster trigger came along with the shard (it is created on every shard).
    with connect(migrated) as conn:
        on_shards = conn.execute(
            "SELECT result FROM run_command_on_shards('fans', $$SELECT count(*) FROM "
            "pg_trigger WHERE tgrelid = '%s'::regclass AND tgname LIKE 'fans_cambio%%'$$)"
        ).fetchall()
    assert {r[0] for r in on_shards} == {"1"}


def test_a_page_not_read_on_the_shards_node_answers_servicio_no_disponible(
    migrated: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the call is not delegated (here forced: the page function sent inside a
    transaction block runs on the coordinator, where no shard is), `lugar` is NULL, no
    fan is read and the service answers 503 servicio_no_disponible, safe to retry."""
    program = _program(engine, "lejos")
    from loyalty_grpc.store import roster as roster_store

    def in_a_transaction(eng: Engine, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(migrated) as conn, conn.transaction():
            return conn.execute(sql, params).fetchall()

    monkeypatch.setattr(roster_store, "fetch_all", in_a_transaction)
    with pytest.raises(LoyaltyError) as unavailable:
        read_roster(engine, program.programa, None, 7, settle_seconds=0)
    assert unavailable.value.codigo is CodigoError.SERVICIO_NO_DISPONIBLE
    assert unavailable.value.entry.http == 503
