"""Distributing the schema on a Citus coordinator (docs/citus.md): run by `loyalty
migrate` after the migrations, a no-op on PostgreSQL without Citus.

Which table goes where is read off `tables.metadata`, so a new table is placed by the rule
without a line here: `REFERENCE` tables get a copy on every node, `OWN_GROUP` tables are
distributed by program in a colocation group of their own, and every other table is
distributed by `programa_id` co-located with `fans`. Tables are distributed in order
(reference tables, the groups' founders, then the others in the metadata's dependency
order, so a table before those whose foreign keys point at it), each in
its own transaction, each skipped when Citus already has it: a run cut short is finished
by running `loyalty migrate` again. The shard count is Citus's own setting
(`citus.shard_count`, 32 unless the operator set it), read when a group is created.
Then the functions of FUNCTIONS are distributed (`create_distributed_function`: Citus runs
a call of one on the node of its program's shard), each skipped when `pg_dist_object`
already has it with its distribution argument.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from loyalty_grpc.store import tables

log = logging.getLogger(__name__)

DISTRIBUTION_COLUMN = "programa_id"
# A copy on every node: joined by every call; the key check finds a key by its hash
# before it knows the program.
REFERENCE = frozenset({"programas", "claves"})
# UNLOGGED, so its shards move only with `block_writes`: kept out of the fans group, whose
# shards move online (logical replication).
OWN_GROUP = frozenset({"limite_llamadas"})
# Where the others live with.
ANCHOR = "fans"


# Functions Citus runs on the node of the program's shard (called as `SELECT * FROM f(…)`
# with the program a constant argument): (signature, distribution argument, the table
# whose colocation group they follow). Registered after the tables, each once.
FUNCTIONS = [
    # The roster page (migration 0013): its snapshot and horizon are the shard's node's.
    ("loyalty_roster_page(text,integer,bigint,bigint,integer)", "p_programa", ANCHOR),
    # The hot writes (migration 0014): the ledger rule, the sale, a redemption, a deposit.
    ("loyalty_move(text,bigint[],bigint[],integer[],bigint[],text,text)", "p_programa", ANCHOR),
    (
        "loyalty_tx(text,text,text,text,integer,text,text,bigint,text,text,text,timestamptz,"
        "bigint,bigint)",
        "p_programa",
        ANCHOR,
    ),
    (
        "loyalty_redeem(text,text,bigint[],text[],timestamptz,text,bigint,timestamptz,boolean)",
        "p_programa",
        ANCHOR,
    ),
    ("loyalty_codes_deposit(text,integer,text[])", "p_programa", ANCHOR),
    # The ledger rule for one fan (migration 0017), called inside the sale and the single
    # redemption on their node.
    ("loyalty_move1(text,bigint,bigint,integer,bigint,text,text)", "p_programa", ANCHOR),
    # The call limit (migration 0015): the key's row locked and the clock read on its
    # shard's node. Called in autocommit: no force_delegation.
    (
        "loyalty_limit_reserve(text,bigint,integer,integer,integer,bigint,bigint,integer,integer)",
        "p_programa",
        "limite_llamadas",
    ),
    (
        "loyalty_limit_settle(text,bigint[],bigint[],integer[],integer[])",
        "p_programa",
        "limite_llamadas",
    ),
    # The wallet sender's turn and record (migration 0016), called in autocommit: no
    # force_delegation needed.
    (
        "loyalty_wallet_turno(text,integer,integer,timestamptz,timestamptz,timestamptz)",
        "p_programa",
        ANCHOR,
    ),
    (
        "loyalty_wallet_record(text,bigint[],bigint[],bigint[],boolean[],integer[],"
        "timestamptz[],bigint[],text[],timestamptz,timestamptz,timestamptz)",
        "p_programa",
        ANCHOR,
    ),
]

# Of FUNCTIONS, those called inside a transaction block too, where Citus delegates a call
# only when the function is registered with `force_delegation => true`: a batch's
# redemption (after `lock_copies`) and the deposit (after the promotion's FOR SHARE). Every
# statement of those transactions names the same program, so the same node.
FORCE_DELEGATION = frozenset(
    {
        "loyalty_redeem(text,text,bigint[],text[],timestamptz,text,bigint,timestamptz,boolean)",
        "loyalty_codes_deposit(text,integer,text[])",
    }
)


@dataclass(frozen=True)
class Placement:
    table: str
    statement: str


def placements() -> list[Placement]:
    """Every table of the schema and the Citus call that places it, in dependency order."""
    result = []
    # References first, then the groups' founders, then the rest (each before the tables
    # whose foreign keys point at it: `sorted_tables` is in dependency order).
    order = {**dict.fromkeys(REFERENCE, 0), ANCHOR: 1, **dict.fromkeys(OWN_GROUP, 1)}
    for table in sorted(tables.metadata.sorted_tables, key=lambda t: order.get(t.name, 2)):
        name = table.name
        if name in REFERENCE:
            statement = f"SELECT create_reference_table('{name}')"
        elif name in OWN_GROUP or name == ANCHOR:
            statement = (
                f"SELECT create_distributed_table('{name}', '{DISTRIBUTION_COLUMN}', "
                "colocate_with => 'none')"
            )
        else:
            statement = (
                f"SELECT create_distributed_table('{name}', '{DISTRIBUTION_COLUMN}', "
                f"colocate_with => '{ANCHOR}')"
            )
        result.append(Placement(name, statement))
    return result


def citus_coordinator(conn: Connection) -> bool:
    """This database has the citus extension and is its cluster's coordinator."""
    if conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first() is None:
        return False
    return bool(conn.execute(text("SELECT citus_is_coordinator()")).scalar_one())


def placed(conn: Connection) -> frozenset[str]:
    """The tables Citus already distributes (or holds as reference tables)."""
    return frozenset(
        conn.execute(text("SELECT logicalrelid::regclass::text FROM pg_dist_partition")).scalars()
    )


def function_statements() -> list[tuple[str, str]]:
    """Every distributed function's signature and the Citus call that registers it."""
    return [
        (
            signature,
            f"SELECT create_distributed_function('{signature}', '{argument}', "
            f"colocate_with => '{table}'"
            + (", force_delegation => true" if signature in FORCE_DELEGATION else "")
            + ")",
        )
        for signature, argument, table in FUNCTIONS
    ]


def functions_distributed(conn: Connection) -> frozenset[str]:
    """The functions of FUNCTIONS Citus already distributes (by signature)."""
    done = set()
    for signature, _statement in function_statements():
        found = conn.execute(
            text(
                "SELECT 1 FROM pg_dist_object WHERE classid = 'pg_proc'::regclass "
                "AND objid = CAST(:signature AS regprocedure) "
                "AND distribution_argument_index IS NOT NULL"
            ),
            {"signature": signature},
        ).first()
        if found is not None:
            done.add(signature)
    return frozenset(done)


def distribute(engine: Engine) -> list[str]:
    """On a Citus coordinator, place every table not placed yet, then distribute every
    function of FUNCTIONS not distributed yet; the tables and functions placed now.
    Elsewhere nothing (an empty list)."""
    with engine.connect() as conn:
        if not citus_coordinator(conn):
            return []
        done = placed(conn)
    now = []
    for placement in placements():
        if placement.table in done:
            continue
        with engine.begin() as conn:
            # Reference tables referenced by tables still local would otherwise pull them
            # into Citus as local tables (then `fans` could not be distributed).
            conn.execute(text("SET LOCAL citus.enable_local_reference_table_foreign_keys = off"))
            # The roster trigger on `fans` (fires on the worker, where the row is written).
            conn.execute(text("SET LOCAL citus.enable_unsafe_triggers = on"))
            # A table with a foreign key to a reference table is created over one connection
            # per node (Citus refuses parallel DDL there).
            conn.execute(text("SET LOCAL citus.multi_shard_modify_mode = 'sequential'"))
            conn.execute(text(placement.statement))
        log.info("distributed %s", placement.table)
        now.append(placement.table)
    with engine.connect() as conn:
        functions = functions_distributed(conn)
    for signature, statement in function_statements():
        if signature in functions:
            continue
        with engine.begin() as conn:
            conn.execute(text(statement))
        log.info("distributed function %s", signature)
        now.append(signature)
    return now
