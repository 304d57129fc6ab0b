"""Migrations 0012, 0013 (expand) and 0020 (contract) on a database with data, and the
rolling upgrade between them (docs/deployment.md "Upgrades"): `loyalty migrate` stops at 0016 on
an existing database, where the previous version's writes still succeed and get their
program filled in; `--contract` then applies 0020, after which every row has its program
and the ledger still adds up. A database never migrated goes straight to head.

The previous version's writes are frozen here in their shapes (the 0011 release's column
lists and `ON CONFLICT` targets, from store/ at that release): they are what 0012 must keep
working while its servers still run."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from loyalty_grpc.store import migrate
from loyalty_grpc.store.migrate import Schema, SchemaState
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL

# --- the previous version's writes (0011), frozen ----------------------------------------

SETUP_0011 = """
INSERT INTO programas (id, nombre, tasa_puntos) VALUES ('a', 'A', 0.1), ('b', 'B', 0.1);
INSERT INTO claves (programa_id, hash, modo, integracion, sufijo)
VALUES ('a', '\\x01', 'vivo', 'pos', '0001'), ('b', '\\x02', 'vivo', 'pos', '0002');
INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token)
VALUES ('a', 'A1', 'Ana', 'ana@example.com', 2020, 'qa1'),
       ('b', 'B1', 'Bea', 'bea@example.com', 2021, 'qb1');
INSERT INTO promos (programa_id, nombre, vigencia_fin) VALUES ('a', 'Café', '2030-01-01');
"""

# store/sale.py `_SALE` with store/ledger.py `move_ctes("venta", one_fan=True)`, 0011.
SALE_0011 = """
WITH fan AS (SELECT pk, fan_id, correo, puntos FROM fans
             WHERE programa_id = %(programa)s AND qr_token = %(qr)s),
venta AS (
  INSERT INTO ventas (programa_id, modo, id_externo, fan_pk, importe_centavos, moneda,
                      terminal, sitio, ts, puntos, clave_id)
  SELECT %(programa)s, 'vivo', %(id_externo)s, fan.pk, 1000, 'MXN', NULL, NULL, now(),
         %(puntos)s, (SELECT id FROM claves WHERE programa_id = %(programa)s)
  FROM fan
  ON CONFLICT (programa_id, modo, id_externo) DO NOTHING
  RETURNING id AS venta_id, fan_pk, puntos, NULL::bigint AS codigo_id
), movido AS (
  UPDATE fans SET puntos = fans.puntos + m.puntos
  FROM (SELECT fan_pk, CAST(sum(puntos) AS bigint) AS puntos FROM venta
        WHERE puntos <> 0 GROUP BY fan_pk) AS m
  WHERE fans.pk = m.fan_pk
  RETURNING fans.pk AS fan_pk, fans.puntos AS saldo
), ledger AS (
  INSERT INTO movimientos (fan_pk, puntos, motivo, venta_id, codigo_id, nota)
  SELECT m.fan_pk, m.puntos, 'venta', m.venta_id, m.codigo_id, ''
  FROM venta AS m JOIN movido ON movido.fan_pk = m.fan_pk
  WHERE m.puntos <> 0
), outbox AS (
  INSERT INTO wallet_outbox (fan_pk, saldo) SELECT fan_pk, saldo FROM movido
)
SELECT venta.venta_id FROM venta
"""

# store/codes.py's deposit, store/wallet.py's fold and delivery record, store/rate_limit.py's
# reservation (its first-request arm), 0011.
DEPOSIT_0011 = """
INSERT INTO codigos (promo_id, programa_id, codigo, estado)
SELECT p.id, p.programa_id, c, 'disponible' FROM promos p, unnest(%(codes)s::text[]) AS c
WHERE p.programa_id = 'a'
ON CONFLICT (promo_id, codigo) DO NOTHING
"""
FOLD_0011 = """
INSERT INTO wallet_pases AS p (fan_pk, saldo_pendiente, saldo_id, pendiente_desde,
                               proximo_intento)
SELECT DISTINCT ON (fan_pk) fan_pk, saldo, id, creado, now() FROM wallet_outbox
ORDER BY fan_pk, id DESC
ON CONFLICT (fan_pk) DO UPDATE
    SET saldo_pendiente = excluded.saldo_pendiente, saldo_id = excluded.saldo_id,
        pendiente_desde = least(p.pendiente_desde, excluded.pendiente_desde)
    WHERE p.saldo_id IS NULL OR p.saldo_id < excluded.saldo_id
"""
DELIVERED_0011 = """
INSERT INTO wallet_entregas (fan_pk, saldo, proveedor) SELECT fan_pk, saldo, 'local'
FROM wallet_outbox
"""
RESERVE_0011 = """
INSERT INTO limite_llamadas AS l (clave_id, segundo, cuentas, reservas, concedidas)
SELECT id, 1, array_fill(0, ARRAY[61]), array_fill(0, ARRAY[5]), 1 FROM claves
ON CONFLICT (clave_id) DO UPDATE SET concedidas = l.concedidas + 1
"""

FILLED = ["movimientos", "wallet_outbox", "wallet_pases", "wallet_entregas", "limite_llamadas"]


def _previous_version_writes(conn: psycopg.Connection[tuple[object, ...]], n: int) -> list[int]:
    """A round of everything the previous version writes: two sales per program, a
    deposit, a fold, a delivery record and a call reservation. The folios."""
    folios = []
    for programa, qr in (("a", "qa1"), ("b", "qb1")):
        for i in range(2):
            row = conn.execute(
                SALE_0011,
                {"programa": programa, "qr": qr, "id_externo": f"v{n}-{i}", "puntos": 10 + i},
            ).fetchone()
            assert row is not None
            folios.append(int(str(row[0])))
    conn.execute(DEPOSIT_0011, {"codes": [f"C{n}-1", f"C{n}-2"]})
    conn.execute(FOLD_0011)
    conn.execute(DELIVERED_0011)
    conn.execute(RESERVE_0011)
    return folios


@pytest.fixture
def at_0011(create_database: Callable[[], str]) -> str:
    url = create_database()
    migrate.upgrade(url, "0011")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SETUP_0011)
        _previous_version_writes(conn, 0)
    return url


def _unfilled(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            table: int(
                str(
                    conn.execute(
                        f"SELECT count(*) FROM {table} WHERE programa_id IS NULL"
                    ).fetchone()[0]  # type: ignore[index]
                )
            )
            for table in FILLED
        }


def test_an_existing_database_stops_before_the_contract(at_0011: str) -> None:
    assert migrate.upgrade(at_0011) == "0018"
    schema = migrate.check(at_0011)
    assert schema.state is SchemaState.CONTRACT_PENDING
    assert schema.usable
    assert schema.contract_note("loyalty migrate") == (
        "the database schema is at revision 0018; contract revision(s) 0020 wait for "
        "`loyalty migrate --contract`, to run once every server runs this version "
        '(docs/deployment.md "Upgrades")'
    )
    # Again: still there, nothing applied behind the operator's back.
    assert migrate.upgrade(at_0011) == "0018"
    assert _unfilled(at_0011) == dict.fromkeys(FILLED, 0)


def test_the_previous_version_keeps_writing_on_the_expand_revisions(at_0011: str) -> None:
    migrate.upgrade(at_0011)
    with psycopg.connect(at_0011, autocommit=True) as conn:
        before = conn.execute("SELECT max(id) FROM ventas").fetchone()
        folios = _previous_version_writes(conn, 1)
        # This version's folios come from the same sequence: never one of theirs.
        ours = [
            int(str(r[0]))
            for r in conn.execute("SELECT nextval('ventas_folio_seq') FROM generate_series(1, 4)")
        ]
        programs = conn.execute(
            "SELECT DISTINCT m.programa_id = f.programa_id FROM movimientos m "
            "JOIN fans f ON f.pk = m.fan_pk"
        ).fetchall()
    assert before is not None
    assert min(folios) > int(str(before[0]))
    assert not set(folios) & set(ours)
    assert _unfilled(at_0011) == dict.fromkeys(FILLED, 0)
    assert programs == [(True,)]


def test_the_contract_keeps_every_row_and_the_ledger(at_0011: str) -> None:
    migrate.upgrade(at_0011)
    with psycopg.connect(at_0011, autocommit=True) as conn:
        _previous_version_writes(conn, 1)
        counts = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()
            for t in [*FILLED, "ventas", "fans", "codigos"]
        }
    assert migrate.upgrade(at_0011, contract=True) == "0020"
    assert migrate.check(at_0011).state is SchemaState.CURRENT
    with psycopg.connect(at_0011, autocommit=True) as conn:
        assert {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone() for t in counts} == counts
        assert conn.execute(LEDGER_MISMATCH_SQL).fetchall() == []
        # A new fan continues the numbering where the identity was.
        pks = conn.execute("SELECT max(pk) FROM fans").fetchone()
        new = conn.execute(
            "INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token) "
            "VALUES ('a', 'A2', 'Alma', 'alma@example.com', 2022, 'qa2') RETURNING pk"
        ).fetchone()
    assert pks is not None
    assert new is not None
    assert int(str(new[0])) > int(str(pks[0]))


def test_the_previous_version_cannot_deposit_codes_after_the_contract(at_0011: str) -> None:
    """Why 0020 waits for `--contract`: the 0011 deposit's `ON CONFLICT` target is gone."""
    migrate.upgrade(at_0011, contract=True)
    with (
        psycopg.connect(at_0011, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InvalidColumnReference),
    ):
        conn.execute(DEPOSIT_0011, {"codes": ["C-AFTER"]})


def test_sql_written_for_the_old_schema_still_sells_after_the_contract(at_0011: str) -> None:
    """A sale that names neither the folio nor the ledger's and outbox's program (the
    reference benchmark's pgbench side, ../shared/bench/tx_vs_pgbench.sh) still works: the
    contract keeps `ventas.id`'s default and the triggers that fill `programa_id`."""
    migrate.upgrade(at_0011, contract=True)
    with psycopg.connect(at_0011, autocommit=True) as conn:
        row = conn.execute(
            SALE_0011, {"programa": "a", "qr": "qa1", "id_externo": "after", "puntos": 7}
        ).fetchone()
        assert row is not None
        assert conn.execute(LEDGER_MISMATCH_SQL).fetchall() == []
        ledger = conn.execute(
            "SELECT programa_id FROM movimientos WHERE venta_id = %s", (row[0],)
        ).fetchall()
    assert ledger == [("a",)]


def test_a_new_database_goes_straight_to_head(create_database: Callable[[], str]) -> None:
    url = create_database()
    assert migrate.upgrade(url) == migrate.head()
    assert Schema.of(migrate.current(url)).state is SchemaState.CURRENT


def test_the_contracts_and_what_this_code_needs() -> None:
    assert migrate.contracts() == frozenset({"0020"})
    assert migrate.needed() == "0018"
    assert migrate.pending_contracts("0011") == ["0020"]
    assert migrate.pending_contracts("0020") == []
    assert migrate.pending_contracts(None) == []
