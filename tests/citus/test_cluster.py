"""The Citus facts issue 27's design rests on (/work/notes/i27 plan §0, checked by its
spike), pinned on the test cluster with scratch tables of this module's own (the project's
schema is not distributable yet): where Citus runs a delegated function, whose transaction
id it sees, where a trigger fires, how a shard of an UNLOGGED table moves.

`sondeo` is distributed by `programa_id` in 4 shards, two on each worker; a program's
worker is the one holding its shard (`shard_of`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
import pytest

from tests.citus.cluster import HOST, Cluster, Node, connect

Connection = psycopg.Connection[tuple[Any, ...]]

PROGRAMS = [f"p{i}" for i in range(1, 21)]

# Writes a row of `sondeo` and says where it ran and in which transaction.
TOCA = """
CREATE FUNCTION {name}(p text, clave int) RETURNS TABLE (port int, xid bigint)
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO sondeo AS s (programa_id, k, v) VALUES (p, clave, 1)
  ON CONFLICT (programa_id, k) DO UPDATE SET v = s.v + 1;
  RETURN QUERY SELECT inet_server_port(), pg_current_xact_id()::text::bigint;
END $$
"""

# One statement at a time: in one transaction Citus refuses to distribute a function
# after a table's shards were created over several connections.
SCHEMA = (
    "CREATE TABLE sondeo (programa_id text, k int, v int NOT NULL, PRIMARY KEY (programa_id, k))",
    "SELECT create_distributed_table('sondeo', 'programa_id', shard_count => 4)",
    TOCA.format(name="sondeo_toca"),
    "SELECT create_distributed_function('sondeo_toca(text,int)', 'p', colocate_with => 'sondeo')",
    TOCA.format(name="sondeo_toca_forzada"),
    "SELECT create_distributed_function('sondeo_toca_forzada(text,int)', 'p',"
    " colocate_with => 'sondeo', force_delegation => true)",
)


@pytest.fixture(scope="module")
def db(citus_url: str) -> Iterator[Connection]:
    """An autocommit connection to the coordinator, with `sondeo` and its functions."""
    with connect(citus_url) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
        yield conn


def value(conn: Connection, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The one value of a one-row answer."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


class Shard(NamedTuple):
    id: int
    name: str
    port: int  # its worker's


def shard_of(conn: Connection, table: str, programa_id: str) -> Shard:
    """The shard holding `programa_id`'s rows of `table`."""
    row = conn.execute(
        "SELECT shardid, shard_name, nodeport FROM citus_shards WHERE table_name = %s::regclass"
        " AND shardid = get_shard_id_for_distribution_column(%s, %s::text)",
        (table, table, programa_id),
    ).fetchone()
    assert row is not None
    return Shard(*row)


def worker_at(cluster: Cluster, port: int) -> Node:
    (node,) = [w for w in cluster.workers if w.port == port]
    return node


def one_program_per_worker(conn: Connection, cluster: Cluster) -> list[tuple[str, Node]]:
    """A program whose `sondeo` shard is on the first worker, and one on the second."""
    by_port = {shard_of(conn, "sondeo", p).port: p for p in reversed(PROGRAMS)}
    return [(by_port[w.port], w) for w in cluster.workers]


def xmin_on_shard(worker: Node, conn: Connection, table: str, programa_id: str, k: int) -> int:
    """The id of the transaction that last wrote the row (`programa_id`, `k`) of `table`,
    read from the shard itself on its worker."""
    shard = shard_of(conn, table, programa_id)
    with worker.connect(str(conn.info.dbname)) as on_worker:
        return int(
            value(
                on_worker,
                f"SELECT xmin::text::bigint FROM {shard.name} WHERE programa_id = %s AND k = %s",
                (programa_id, k),
            )
        )


def move_coordinator_xids_ahead(conn: Connection, by: int = 5000) -> int:
    """Spend `by` transaction ids on the coordinator (a subtransaction each, one statement,
    ~15 ms) so that its ids cannot be mistaken for the workers' (after initdb the three
    counters are a few apart); its next id after."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS gasto (i int)")
    conn.execute(
        f"DO $$ BEGIN FOR i IN 1..{by} LOOP"
        " BEGIN INSERT INTO gasto VALUES (i); EXCEPTION WHEN OTHERS THEN RAISE; END;"
        " END LOOP; END $$"
    )
    return int(value(conn, "SELECT pg_current_xact_id()::text::bigint"))


def test_the_workers_are_registered_and_have_the_metadata(
    citus_cluster: Cluster, db: Connection
) -> None:
    """The coordinator knows itself (group 0, no shards) and both workers, and each worker
    has the metadata synced: what lets a worker run a delegated function's statements."""
    rows = db.execute(
        "SELECT groupid, nodename, nodeport, isactive, hasmetadata, metadatasynced,"
        " shouldhaveshards FROM pg_dist_node ORDER BY groupid"
    ).fetchall()
    coordinator, *workers = rows
    assert coordinator == (0, HOST, citus_cluster.coordinator.port, True, True, True, False)
    assert [(r[1], r[2]) for r in workers] == [(HOST, w.port) for w in citus_cluster.workers]
    assert all(r[3:] == (True, True, True, True) for r in workers), workers


def test_a_hash_distributed_table_spreads_programs_over_both_workers(
    citus_cluster: Cluster, db: Connection
) -> None:
    """Rows of a table distributed by `programa_id` land on the shards of both workers,
    all of one program's rows on its shard's worker."""
    with db.cursor() as cur:
        cur.executemany(
            "INSERT INTO sondeo (programa_id, k, v) VALUES (%s, %s, 0)",
            [(p, k) for p in PROGRAMS for k in range(-5, 0)],
        )
    counted = {}
    for worker in citus_cluster.workers:
        shards = db.execute(
            "SELECT shard_name FROM citus_shards"
            " WHERE table_name = 'sondeo'::regclass AND nodeport = %s",
            (worker.port,),
        ).fetchall()
        with worker.connect(str(db.info.dbname)) as on_worker:
            counted[worker.name] = sum(
                value(on_worker, f"SELECT count(*) FROM {name} WHERE k < 0") for (name,) in shards
            )
    assert all(n > 0 for n in counted.values()), counted
    assert sum(counted.values()) == len(PROGRAMS) * 5
    for program in PROGRAMS[:3]:
        shard = shard_of(db, "sondeo", program)
        with worker_at(citus_cluster, shard.port).connect(str(db.info.dbname)) as on_worker:
            query = f"SELECT count(*) FROM {shard.name} WHERE programa_id = %s AND k < 0"
            assert value(on_worker, query, (program,)) == 5


def test_a_delegated_function_runs_on_the_programs_worker_in_its_transaction(
    citus_cluster: Cluster, db: Connection
) -> None:
    """`SELECT * FROM f(programa, …)` called autocommit from the coordinator runs on the
    worker holding that program's shard, and `pg_current_xact_id()` inside it is that
    worker's transaction (the one that wrote the row), not the coordinator's."""
    coordinator_next = move_coordinator_xids_ahead(db)
    for program, worker in one_program_per_worker(db, citus_cluster):
        row = db.execute("SELECT * FROM sondeo_toca(%s, 1)", (program,)).fetchone()
        assert row is not None
        port, xid = row
        assert port == worker.port
        assert xid == xmin_on_shard(worker, db, "sondeo", program, 1)
        assert xid < coordinator_next - 1000  # far below the coordinator's ids


def test_inside_a_transaction_block_only_force_delegation_delegates(
    citus_cluster: Cluster, db: Connection
) -> None:
    """Inside BEGIN … COMMIT the same call runs on the coordinator (each statement of its
    body then goes to the worker on its own), unless the function was registered with
    `force_delegation => true`."""
    program, worker = one_program_per_worker(db, citus_cluster)[0]
    with db.transaction():
        row = db.execute("SELECT * FROM sondeo_toca(%s, 2)", (program,)).fetchone()
        coordinators = value(db, "SELECT pg_current_xact_id()::text::bigint")
    assert row == (citus_cluster.coordinator.port, coordinators)
    with db.transaction():
        row = db.execute("SELECT * FROM sondeo_toca_forzada(%s, 3)", (program,)).fetchone()
    assert row is not None
    assert row[0] == worker.port
    assert row[1] == xmin_on_shard(worker, db, "sondeo", program, 3)


def test_a_trigger_stamps_the_workers_xid_on_a_routed_insert(
    citus_cluster: Cluster, db: Connection
) -> None:
    """A BEFORE INSERT OR UPDATE trigger on a distributed table (created with
    `citus.enable_unsafe_triggers` on) fires on the worker: a plain INSERT or UPDATE sent
    from the coordinator gets the worker's transaction id, not the coordinator's."""
    for statement in (
        "CREATE TABLE cambio (programa_id text, k int, v int, cambio_xid bigint,"
        " PRIMARY KEY (programa_id, k))",
        "SELECT create_distributed_table('cambio', 'programa_id', colocate_with => 'sondeo')",
        """
        CREATE FUNCTION cambio_sello() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          NEW.cambio_xid := pg_current_xact_id()::text::bigint;
          RETURN NEW;
        END $$
        """,
    ):
        db.execute(statement)
    with pytest.raises(psycopg.errors.InternalError_, match="triggers are not supported"):
        db.execute(
            "CREATE TRIGGER cambio_sello BEFORE INSERT OR UPDATE ON cambio"
            " FOR EACH ROW EXECUTE FUNCTION cambio_sello()"
        )
    db.execute("SET citus.enable_unsafe_triggers = on")
    try:
        db.execute(
            "CREATE TRIGGER cambio_sello BEFORE INSERT OR UPDATE ON cambio"
            " FOR EACH ROW EXECUTE FUNCTION cambio_sello()"
        )
    finally:
        db.execute("RESET citus.enable_unsafe_triggers")
    coordinator_next = move_coordinator_xids_ahead(db)
    for program, worker in one_program_per_worker(db, citus_cluster):
        for statement in (
            "INSERT INTO cambio (programa_id, k, v) VALUES (%s, 1, 0) RETURNING cambio_xid",
            "UPDATE cambio SET v = v + 1 WHERE programa_id = %s AND k = 1 RETURNING cambio_xid",
        ):
            stamped = value(db, statement, (program,))
            assert stamped == xmin_on_shard(worker, db, "cambio", program, 1)
            assert stamped < coordinator_next - 1000


def test_a_shard_of_an_unlogged_table_moves_only_blocking_writes(
    citus_cluster: Cluster, db: Connection
) -> None:
    """A shard of an UNLOGGED distributed table cannot move by logical replication (the
    default mode: PostgreSQL publishes no unlogged table); with `shard_transfer_mode =>
    'block_writes'` it moves, rows and all, and stays UNLOGGED."""
    for statement in (
        "CREATE UNLOGGED TABLE limite (programa_id text, k int, PRIMARY KEY (programa_id, k))",
        "SELECT create_distributed_table('limite', 'programa_id', colocate_with => 'none',"
        " shard_count => 2)",
        "INSERT INTO limite SELECT 'p1', k FROM generate_series(1, 50) AS k",
    ):
        db.execute(statement)
    shard = shard_of(db, "limite", "p1")
    target = next(w for w in citus_cluster.workers if w.port != shard.port)
    move = "SELECT citus_move_shard_placement(%s, %s, %s, %s, %s"
    places = (shard.id, HOST, shard.port, HOST, target.port)
    with pytest.raises(
        psycopg.errors.InvalidParameterValue, match=r"cannot add relation .* to publication"
    ):
        db.execute(move + ")", places)
    assert shard_of(db, "limite", "p1") == shard
    db.execute(move + ", shard_transfer_mode => 'block_writes')", places)
    assert shard_of(db, "limite", "p1") == shard._replace(port=target.port)
    assert value(db, "SELECT count(*) FROM limite WHERE programa_id = 'p1'") == 50
    with target.connect(str(db.info.dbname)) as on_worker:
        on_worker.execute("SET citus.override_table_visibility = off")  # shards are hidden
        query = "SELECT relpersistence FROM pg_class WHERE oid = %s::regclass"
        assert value(on_worker, query, (shard.name,)) == "u"


def test_a_node_whose_port_was_taken_starts_on_another(
    citus_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The fixture's own guard: a free port from the OS is free only until some other
    process binds it; the node then starts on a new one (cluster.py `Node.start`)."""
    import socket

    from tests.citus.cluster import _new_node, server_owner

    work = tmp_path_factory.mktemp("taken")
    work.chmod(0o755)
    node = _new_node(work, "node", server_owner())
    with socket.socket() as squatter:
        squatter.bind((HOST, node.port))
        squatter.listen()
        taken = node.port
        node.init()
        try:
            node.start()
            with node.connect() as conn:
                assert conn.execute("SELECT current_setting('port')::int").fetchone() == (
                    node.port,
                )
        finally:
            node.stop()
    assert node.port != taken
    del citus_cluster  # only for Citus being built and the servers' user set up
