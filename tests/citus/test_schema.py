"""`loyalty migrate` on a Citus coordinator (store/distribution.py, docs/citus.md): the
migrations run and every table of the schema is placed as the rule says — reference
tables, tables distributed by program co-located with `fans`, `limite_llamadas` in a group
of its own — none left local by accident; the roster trigger is on every shard of `fans`;
running it again changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from loyalty_grpc.store import distribution, migrate, tables
from loyalty_grpc.store.db import sqlalchemy_url


@pytest.fixture(scope="module")
def migrated(citus_url: str) -> str:
    assert migrate.upgrade(citus_url) == migrate.head()
    return citus_url


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def test_every_table_is_placed_by_the_rule(migrated: str) -> None:
    placed = {
        name: (method, key, group, model)
        for name, method, key, group, model in _rows(
            migrated,
            "SELECT logicalrelid::regclass::text, partmethod, "
            "CASE WHEN partkey IS NULL THEN NULL "
            "ELSE column_to_column_name(logicalrelid, partkey) END, colocationid, repmodel "
            "FROM pg_dist_partition",
        )
    }
    assert set(placed) == {t.name for t in tables.metadata.sorted_tables}
    fans_group = placed["fans"][2]
    for name, (method, key, group, model) in placed.items():
        if name in distribution.REFERENCE:
            assert (method, key, model) == ("n", None, "t"), name  # reference, not local
        else:
            assert (method, key) == ("h", distribution.DISTRIBUTION_COLUMN), name
            assert (group == fans_group) is (name not in distribution.OWN_GROUP), name


def test_only_alembic_s_own_table_stays_local(migrated: str) -> None:
    local = _rows(
        migrated,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = 'r' "
        "AND c.oid NOT IN (SELECT logicalrelid FROM pg_dist_partition)",
    )
    assert local == [("alembic_version",)]


def test_the_roster_trigger_is_on_every_shard_of_fans(migrated: str) -> None:
    """On a shard the trigger is named after it (`fans_cambio_<shard id>`), and fires on
    the worker that writes the row."""
    shards = _rows(
        migrated,
        "SELECT shardid, success, result FROM run_command_on_shards('fans', $$"
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = '%s'::regclass "
        "AND tgname LIKE 'fans_cambio%%' AND tgenabled = 'O'$$)",
    )
    assert shards
    assert {(success, result) for _shard, success, result in shards} == {(True, "1")}


def test_the_delegated_functions_carry_their_settings_on_every_node(migrated: str) -> None:
    """A delegated call runs the node's copy of the function: its settings (`SET` of
    migrations 0016–0018: custom plans, the call limit's index, the wallet record's hash
    join) must be there too, not only on the coordinator."""
    for signature, _argument, _colocated in distribution.FUNCTIONS:
        query = (
            "SELECT coalesce(proconfig::text, '') FROM pg_proc "
            f"WHERE oid = '{signature}'::regprocedure"
        )
        [(here,)] = _rows(migrated, query)
        nodes = _rows(migrated, f"SELECT success, result FROM run_command_on_workers($${query}$$)")
        assert nodes == [(True, here)] * 2, (signature, here, nodes)
    [(record,)] = _rows(
        migrated,
        "SELECT proconfig::text FROM pg_proc WHERE proname = 'loyalty_wallet_record'",
    )
    assert "enable_nestloop=off" in record


def test_migrating_again_places_nothing(migrated: str) -> None:
    assert migrate.upgrade(migrated) == migrate.head()
    engine = create_engine(sqlalchemy_url(migrated), poolclass=NullPool)
    try:
        assert distribution.distribute(engine) == []
    finally:
        engine.dispose()
