"""The Alembic migrations build exactly the schema of store/tables.py, and the roster
change trigger stamps only roster field changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, insert, select, text, update

from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.tables import fans, metadata, programas


@pytest.fixture(scope="module")
def migrated_url(create_database: Callable[[], str]) -> str:
    url = create_database()
    assert migrate.current(url) is None
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def eng(migrated_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_url, pool_size=2)
    yield engine
    engine.dispose()


def test_current_is_head(migrated_url: str) -> None:
    assert migrate.head() == "0020"
    assert migrate.current(migrated_url) == migrate.head()


def test_upgrade_twice_is_a_noop(migrated_url: str, eng: Engine) -> None:
    def snapshot() -> list[tuple[object, ...]]:
        with eng.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    text(
                        "SELECT table_name, column_name, data_type, column_default "
                        "FROM information_schema.columns WHERE table_schema = 'public' "
                        "ORDER BY table_name, column_name"
                    )
                )
            ]

    before = snapshot()
    migrate.upgrade(migrated_url)
    assert snapshot() == before
    assert migrate.current(migrated_url) == migrate.head()


def test_autogenerate_sees_no_difference(eng: Engine) -> None:
    """Tables, columns, types, nullability, server defaults, identities, primary keys,
    foreign keys, unique constraints and indexes (expression indexes included) agree.
    Autogenerate cannot see CHECK constraints, sequences or triggers: the next tests
    look those up in the catalogue."""
    with eng.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        diff = compare_metadata(ctx, metadata)
    # alembic_version is Alembic's own table, not part of the schema.
    diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name == "alembic_version")]
    assert diff == []


_CATALOGUE = {
    "constraints": (
        "SELECT t.relname, c.conname, c.contype, pg_get_constraintdef(c.oid) "
        "FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = 'public' AND t.relname <> 'alembic_version'"
    ),
    "indexes": (
        "SELECT tablename, indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
    ),
    "columns": (
        "SELECT table_name, column_name, data_type, is_nullable, column_default, "
        "is_identity, identity_generation FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name <> 'alembic_version'"
    ),
    "storage parameters": (
        "SELECT relname, array_to_string(reloptions, ',') FROM pg_class "
        "WHERE relnamespace = 'public'::regnamespace AND reloptions IS NOT NULL"
    ),
}


def _catalogue(engine: Engine) -> dict[str, set[tuple[object, ...]]]:
    with engine.connect() as conn:
        return {k: {tuple(r) for r in conn.execute(text(q))} for k, q in _CATALOGUE.items()}


def test_catalogue_matches_create_all(
    eng: Engine,
    create_database: Callable[[], str],
) -> None:
    """What autogenerate cannot see, compared in PostgreSQL's own words: every constraint
    (CHECK included) with its definition, every index definition, every column default and
    every table's storage parameters equal those of a database built by
    `metadata.create_all` from tables.py."""
    reference = make_engine(create_database(), pool_size=1)
    try:
        with reference.begin() as conn:
            metadata.create_all(conn)
        expected = _catalogue(reference)
    finally:
        reference.dispose()
    got = _catalogue(eng)
    assert any(row[2] == "c" for row in expected["constraints"])
    assert {row[0] for row in expected["storage parameters"]} == {"wallet_outbox", "wallet_pases"}
    for kind in _CATALOGUE:
        assert got[kind] - expected[kind] == set(), kind
        assert expected[kind] - got[kind] == set(), kind


def test_sequences_and_trigger_exist(eng: Engine) -> None:
    """Every sequence tables.py names in a default exists, and the roster trigger."""
    with eng.connect() as conn:
        sequences = set(
            conn.execute(text("SELECT relname FROM pg_class WHERE relkind = 'S'")).scalars()
        )
        trig = conn.execute(
            text(
                "SELECT tgenabled FROM pg_trigger WHERE tgname = 'fans_cambio' "
                "AND tgrelid = 'fans'::regclass"
            )
        ).scalar()
    assert sequences == set(metadata._sequences)  # what tables.py declares
    assert trig == "O"  # enabled (origin)


def _stamp(eng: Engine, pk: int) -> tuple[object, ...]:
    with eng.connect() as conn:
        row = conn.execute(
            select(fans.c.actualizado, fans.c.cambio_xid).where(fans.c.pk == pk)
        ).one()
    return tuple(row)


@pytest.fixture(scope="module")
def fan_pk(eng: Engine) -> int:
    with eng.begin() as conn:
        conn.execute(insert(programas).values(id="p", nombre="P", tasa_puntos="0.1"))
        return int(
            conn.execute(
                insert(fans)
                .values(
                    programa_id="p",
                    fan_id="F1",
                    nombre="Ana",
                    correo="ana@example.com",
                    socio_desde=2020,
                    qr_token="q1",
                )
                .returning(fans.c.pk)
            ).scalar_one()
        )


def test_insert_is_stamped_by_the_trigger(eng: Engine, fan_pk: int) -> None:
    """An insert takes the xid of its own transaction from the trigger (on Citus the
    column default would be evaluated on the coordinator, the trigger runs on the worker),
    whatever value the INSERT gave. (`fan_pk`: the program exists.)"""
    del fan_pk
    with eng.begin() as conn:
        xid = conn.execute(text("SELECT pg_current_xact_id()::text::bigint")).scalar_one()
        stamped = conn.execute(
            insert(fans)
            .values(
                programa_id="p",
                fan_id="F-TRIGGER",
                nombre="Eva",
                correo="eva@example.com",
                socio_desde=2020,
                qr_token="q-trigger",
                cambio_xid=1,
            )
            .returning(fans.c.cambio_xid, fans.c.actualizado)
        ).one()
    assert stamped.cambio_xid == xid
    assert stamped.actualizado is not None


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("puntos", 10),
        ("nombre", "Ana María"),
        ("correo", "ana.m@example.com"),
        ("socio_desde", 2019),
        ("baja_motivo", "x"),
    ],
)
def test_roster_field_change_bumps_the_stamp(
    eng: Engine,
    fan_pk: int,
    column: str,
    value: object,
) -> None:
    actualizado, xid = _stamp(eng, fan_pk)
    with eng.begin() as conn:
        conn.execute(update(fans).where(fans.c.pk == fan_pk).values({column: value}))
    new_actualizado, new_xid = _stamp(eng, fan_pk)
    assert new_actualizado > actualizado  # type: ignore[operator]
    assert new_xid != xid


def test_estado_change_bumps_the_stamp(eng: Engine, fan_pk: int) -> None:
    stamp = _stamp(eng, fan_pk)[0]
    with eng.begin() as conn:
        conn.execute(
            update(fans).where(fans.c.pk == fan_pk).values(estado="baja", baja_en=text("now()"))
        )
    mid = _stamp(eng, fan_pk)[0]
    with eng.begin() as conn:
        conn.execute(
            update(fans)
            .where(fans.c.pk == fan_pk)
            .values(estado="activo", baja_en=None, baja_motivo=None)
        )
    assert stamp < mid < _stamp(eng, fan_pk)[0]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("temporadas", 7),
        ("qr_token", "q2"),
        ("puntos", None),
    ],
)
def test_other_or_no_change_keeps_the_stamp(
    eng: Engine,
    fan_pk: int,
    column: str,
    value: object,
) -> None:
    before = _stamp(eng, fan_pk)
    with eng.begin() as conn:
        if value is None:  # an UPDATE that writes the same value is no change
            conn.execute(update(fans).where(fans.c.pk == fan_pk).values({column: fans.c[column]}))
        else:
            conn.execute(update(fans).where(fans.c.pk == fan_pk).values({column: value}))
    assert _stamp(eng, fan_pk) == before


def test_downgrade_to_base_and_back(create_database: Callable[[], str]) -> None:
    """Through the `alembic` CLI's path in env.py (a URL, no handed-over connection)."""
    from alembic import command
    from alembic.config import Config

    url = create_database()
    cfg = Config()
    cfg.set_main_option("script_location", str(migrate.MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")
    assert migrate.current(url) == migrate.head()
    command.downgrade(cfg, "base")
    assert migrate.current(url) is None
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            left = (
                conn.execute(
                    text(
                        "SELECT relname FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'public' AND relname NOT LIKE 'alembic_version%' "
                        "AND relkind IN ('r', 'S', 'i')"
                    )
                )
                .scalars()
                .all()
            )
            functions = conn.execute(
                text("SELECT count(*) FROM pg_proc WHERE proname = 'fans_cambio'")
            ).scalar_one()
    finally:
        engine.dispose()
    assert left == []
    assert functions == 0
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.head()


def test_wallet_data_survives_0007_both_ways(create_database: Callable[[], str]) -> None:
    """Balances waiting in 0006's outbox and the sender's state per fan survive 0007: the
    new sender folds the rows in and respects a back-off in progress. Downgrading puts
    the balances still waiting back into the outbox under their ids."""
    from datetime import UTC, datetime, timedelta

    from loyalty_grpc.wallet import LocalProvider, SendReport, send_pending

    url = create_database()
    migrate.upgrade(url, "0006")
    engine = make_engine(url, pool_size=2)
    later = datetime.now(UTC) + timedelta(hours=1)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO programas (id, nombre, tasa_puntos) VALUES ('p', 'P', 0.1)")
            )
            pks = [
                conn.execute(
                    text(
                        "INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, "
                        "qr_token) VALUES ('p', :f, 'n', :f || '@x.example', 2020, :f) RETURNING pk"
                    ),
                    {"f": f},
                ).scalar_one()
                for f in ("DUE", "WAITS", "DONE")
            ]
            due, waits, done = pks
            conn.execute(
                text(
                    "INSERT INTO wallet_outbox (fan_pk, saldo) VALUES "
                    "(:due, 10), (:waits, 7), (:due, 25)"
                ),
                {"due": due, "waits": waits},
            )
            conn.execute(
                text(
                    "INSERT INTO wallet_pases (fan_pk, intentos, proximo_intento, ultimo_error, "
                    "entregado_saldo) VALUES (:waits, 3, :later, 'down', NULL), "
                    "(:done, 0, now(), NULL, 5)"
                ),
                {"waits": waits, "done": done, "later": later},
            )
            waits_id = conn.execute(
                text("SELECT id FROM wallet_outbox WHERE fan_pk = :f"), {"f": waits}
            ).scalar_one()
        migrate.upgrade(url)
        assert send_pending(engine, LocalProvider(engine)) == SendReport(claimed=1, delivered=1)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fan_pk, saldo FROM wallet_entregas")).all() == [
                (due, 25)
            ]
            state = {
                r.fan_pk: r
                for r in conn.execute(
                    text(
                        "SELECT fan_pk, intentos, proximo_intento, ultimo_error, entregado_saldo, "
                        "saldo_pendiente FROM wallet_pases"
                    )
                )
            }
        assert (
            state[waits].intentos,
            state[waits].proximo_intento,
            state[waits].ultimo_error,
            state[waits].saldo_pendiente,
        ) == (3, later, "down", 7)
        assert (state[done].entregado_saldo, state[done].saldo_pendiente) == (5, None)
        assert (state[due].entregado_saldo, state[due].saldo_pendiente) == (25, None)
        engine.dispose()

        migrate.downgrade(url, "0006")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, fan_pk, saldo FROM wallet_outbox")).all() == [
                (waits_id, waits, 7)
            ]
            assert "saldo_pendiente" not in {
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_name = 'wallet_pases'"
                    )
                )
            }
    finally:
        engine.dispose()
