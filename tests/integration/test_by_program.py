"""Issue 27, the code half, on a real PostgreSQL: every hot statement reads each program
table by its program (their plans), the sale's folio (store/folios.py), and this version's
work on a database at the last expand revision (the previous release's schema plus the
new keys and functions), then contracted to 0020.

Two programs hold the same Fan IDs and the same code texts, so a statement that loses its
program filter would find the other program's rows.
"""

from __future__ import annotations

import importlib
import json
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import psycopg
import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from sqlalchemy import Engine, select, text

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.keys import key_hash
from loyalty_grpc.domain.rate_limit import LimitKey, Refund
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.backoffice.points import adjust_points, void_sale
from loyalty_grpc.services.pos.redeem import Redemption, redeem_code, redeem_codes
from loyalty_grpc.services.pos.resolve import resolve_fan
from loyalty_grpc.services.pos.sales import NewSale, register_sale
from loyalty_grpc.store import folios as folios_module
from loyalty_grpc.store import rate_limit as rate_limit_store
from loyalty_grpc.store import redeem as redeem_store
from loyalty_grpc.store import resolve as resolve_store
from loyalty_grpc.store import sale as sale_store
from loyalty_grpc.store.autocommit import autocommit
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.keys import caller_of
from loyalty_grpc.store.ledger import MOVE, Motivo
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.rate_limit import PgCounters
from loyalty_grpc.store.redeem import ByCopies, ByText, RedeemValues
from loyalty_grpc.store.sale import SaleValues
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL, codigos, fans, movimientos, ventas
from loyalty_grpc.store.uow import run_in_uow
from loyalty_grpc.wallet.outbox import send_pending
from loyalty_grpc.wallet.providers import LocalProvider

PROGRAMS = ("uno", "dos")
# The revision before the contract (0020): this version's code runs on it.
EXPAND = str(
    importlib.import_module(
        "loyalty_grpc.store.migrations.versions.0020_shard_keys_contract"
    ).down_revision
)
FAN_IDS = [f"F{i:03}" for i in range(1, 5)]
CODES = [f"C-{i:04}" for i in range(1, 21)]
# The tables distributed by program, each read by its program in a hot statement's plan.
PROGRAM_TABLES = (
    "fans",
    "promos",
    "codigos",
    "ventas",
    "movimientos",
    "wallet_outbox",
    "wallet_pases",
    "limite_llamadas",
)


def _fixture(programa: str) -> dict[str, Any]:
    return {
        "id": programa,
        "nombre": f"Club {programa}",
        "tasa_puntos": "0.1",
        "claves": [
            {
                "clave": f"lp_vivo_{programa}" + secrets.token_hex(12),
                "integracion": "Caja",
                "permisos": ["tx:escribir", "redeem:escribir", "fan:leer"],
            }
        ],
        "fans": [
            {
                "id": f,
                "nombre": f,
                "correo": f"{f.lower()}@example.com",
                "socio_desde": 2020,
                "qr_token": f"qr-{f.lower()}",
            }
            for f in FAN_IDS
        ],
        "promos": [
            {
                "nombre": "Promo",
                "vigencia_fin": "2099-12-31",
                "puntos_canje": 7,
                "codigos": [
                    {"codigo": c, "estado": "asignado", "fan": FAN_IDS[i % len(FAN_IDS)]}
                    for i, c in enumerate(CODES)
                ],
            }
        ],
    }


def load_world(engine: Engine) -> dict[str, Caller]:
    """The two programs (same Fan IDs, same code texts); their live keys' callers."""
    document = {"programas": [_fixture(p) for p in PROGRAMS]}
    run_in_uow(engine, apply_fixture, json.dumps(document))
    callers: dict[str, Caller] = {}
    for programa in document["programas"]:
        caller = caller_of(engine, key_hash(programa["claves"][0]["clave"]))
        assert caller is not None
        callers[programa["id"]] = caller
    return callers


@pytest.fixture(scope="module")
def world(engine: Engine) -> dict[str, Caller]:
    return load_world(engine)


def sale(id_externo: str, fan: str = FAN_IDS[0], centavos: int = 10_000) -> NewSale:
    return NewSale(
        id_externo=id_externo,
        fan=parse_fan_ref(fan),
        centavos=centavos,
        moneda="MXN",
        ts=datetime.now(UTC),
    )


def redemption() -> Redemption:
    now = datetime.now(UTC)
    return Redemption(terminal="T1", ts=now, now=now)


def assert_ledger_consistent(engine: Engine) -> None:
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []


# ---------------------------------------------------------------- the plans


@dataclass
class Sent:
    """A statement a store function would have sent, with its parameters."""

    label: str
    sql: str
    params: dict[str, object]


def _scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Relation Name" in plan and plan["Node Type"] != "ModifyTable":
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _plans(engine: Engine, sent: Sent) -> list[dict[str, Any]]:
    """The statement's plan, planned as if no sequential scan were possible; for a call of
    one of the hot functions (migration 0014), the plans of the statements its body ran
    (auto_explain's nested statements, sent back as notices), in a transaction rolled
    back."""
    if "FROM loyalty_" not in sent.sql:
        with autocommit(engine) as conn, conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            row = conn.execute("EXPLAIN (FORMAT JSON) " + sent.sql, sent.params).fetchone()
            conn.execute("SET LOCAL enable_seqscan = on")
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        return [plan[0]["Plan"]]
    notices: list[str] = []

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        notices.append(diagnostic.message_primary or "")

    with autocommit(engine) as conn:
        conn.add_notice_handler(keep)
        try:
            with conn.transaction(force_rollback=True):
                conn.execute("LOAD 'auto_explain'")
                for setting in (
                    "enable_seqscan = off",
                    "auto_explain.log_min_duration = 0",
                    "auto_explain.log_nested_statements = on",
                    "auto_explain.log_format = json",
                    "auto_explain.log_level = notice",
                ):
                    conn.execute(f"SET LOCAL {setting}")
                conn.execute(sent.sql, sent.params).fetchall()
        finally:
            conn.remove_notice_handler(keep)
    return [json.loads(n[n.index("{") :])["Plan"] for n in notices if "plan:" in n]


def _program_reads(engine: Engine, sent: Sent) -> list[tuple[str, str, str]]:
    """(table, node type, condition) of every read of a program table in the statement's
    plans (`_plans`): a read whose index condition does not name `programa_id` is a read
    across programs."""
    return [
        (
            node["Relation Name"],
            node["Node Type"],
            node.get("Index Cond", "") + node.get("Recheck Cond", ""),
        )
        for plan in _plans(engine, sent)
        for node in _scans(plan)
        if node["Relation Name"] in PROGRAM_TABLES
    ]


def _hot_statements(engine: Engine, caller: Caller, monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """What the sale (each form of the fan's value, and its replay), the resolve (each
    form), both redemptions (and what they credited), the ledger's moves and the rate
    limit's reservation send: captured from the store functions themselves, not sent."""
    sent: list[Sent] = []

    def capture(label: str, answer: object) -> Callable[..., object]:
        def send(_engine: object, sql: str, params: dict[str, object]) -> object:
            sent.append(Sent(label, sql, dict(params)))
            return answer

        return send

    values = SaleValues(
        folio=1,
        programa=caller.programa_id,
        modo="vivo",
        id_externo="plan",
        centavos=100,
        moneda="MXN",
        terminal=None,
        sitio=None,
        ts=datetime.now(UTC),
        puntos=1,
        clave_id=caller.clave_id,
    )
    refs = {
        "qr_url": "https://x.example/f/v/qr-f001",
        "correo": "f001@example.com",
        "texto": "C-0001",
    }
    monkeypatch.setattr(sale_store, "fetch_one", capture("sale", None))
    for forma, value in refs.items():
        sale_store.insert_sale(engine, values, parse_fan_ref(value))
        sent[-1].label = f"sale[{forma}]"
    monkeypatch.setattr(sale_store, "fetch_one", capture("sale ORIGINAL", (1, 1, 1, 1, 1)))
    sale_store.original_sale(engine, caller.programa_id, "vivo", "plan")
    monkeypatch.setattr(resolve_store, "fetch_one", capture("resolve", None))
    for forma, value in refs.items():
        resolve_store.fan_and_promo(
            engine,
            caller.programa_id,
            parse_fan_ref(value),
            date(2030, 1, 1),
        )
        sent[-1].label = f"resolve[{forma}]"
    monkeypatch.setattr(redeem_store, "fetch_all", capture("redeem", []))
    now = datetime.now(UTC)
    redeem_values = RedeemValues(caller.programa_id, True, caller.clave_id, "T1", now, now)
    redeem_store.redeem(engine, redeem_values, ByText("C-0001"))
    sent[-1].label = "redeem, single"
    redeem_store.redeem(engine, redeem_values, ByCopies((1, 2)))
    sent[-1].label = "redeem, batch"
    redeem_store.credited_by_redemptions(engine, caller.programa_id, [1, 2])
    sent[-1].label = "credited"
    monkeypatch.setattr(rate_limit_store, "fetch_one", capture("reserve", (1, [0], [0], 1, 1.0)))
    PgCounters(engine).reserve(LimitKey(caller.programa_id, caller.clave_id), 1, 10, slack_calls=0)
    move: dict[str, object] = {
        "programa": caller.programa_id,
        "motivo": Motivo.AJUSTE.value,
        "nota": "",
    }
    sent.append(
        Sent(
            "move one",
            MOVE,
            {**move, "fan_pks": [1], "puntos": [1], "venta_ids": [None], "codigo_ids": [None]},
        )
    )
    sent.append(
        Sent(
            "move many",
            MOVE,
            {**move, "fan_pks": [1, 2], "puntos": [1, 1], "venta_ids": [None, None]}
            | {"codigo_ids": [None, None]},
        )
    )
    return sent


def test_every_hot_statement_reads_each_program_table_by_its_program(
    engine: Engine, world: dict[str, Caller], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planned with sequential scans off, every read of a program table in the sale, the
    resolve, the redemptions, the ledger's moves and the rate limit is an index lookup
    whose condition names `programa_id` (on the cluster: one shard), fans by (programa_id,
    pk)."""
    statements = _hot_statements(engine, world["uno"], monkeypatch)
    monkeypatch.undo()
    assert len(statements) == 13
    seen: set[str] = set()
    for sent in statements:
        reads = _program_reads(engine, sent)
        for table, node, condition in reads:
            seen.add(table)
            assert node != "Seq Scan", (sent.label, table, node)
            assert "programa_id" in condition, (sent.label, table, node, condition)
            if table == "fans" and "pk" in condition:
                assert "programa_id" in condition.split("pk")[0], (sent.label, condition)
    assert {"fans", "promos", "codigos", "ventas", "movimientos"} <= seen


# ---------------------------------------------------------------- the folio


def test_folios_taken_at_once_by_many_threads_and_processes_never_repeat(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sources (two server processes) of blocks of 8, 16 threads taking 100 folios
    each at once: 1,600 folios, no repeat, all int32, one round trip per block."""
    blocks = []
    real = getattr(folios_module, "fetch_all")  # noqa: B009 (not exported: the one patched)

    def counted(*args: Any) -> Any:
        blocks.append(1)
        return real(*args)

    monkeypatch.setattr(folios_module, "fetch_all", counted)
    sources = [Folios(engine, block=8), Folios(engine, block=8)]

    def take(i: int) -> list[int]:
        return [sources[i % 2].take() for _ in range(100)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        taken = [folio for chunk in pool.map(take, range(16)) for folio in chunk]
    assert len(taken) == len(set(taken)) == 1600
    assert all(0 < folio <= INT32_MAX for folio in taken)
    assert len(blocks) == 1600 // 8


def test_a_duplicate_sale_leaves_a_gap_never_a_repeat(
    engine: Engine, world: dict[str, Caller]
) -> None:
    """One source, one thread: the duplicate took the next folio and left it unused; the
    next sale has the one after it. Both programs' sales share the one sequence."""
    source = Folios(engine)
    uno, dos = world["uno"], world["dos"]
    first = register_sale(engine, source, uno, sale("gap-1"))
    again = register_sale(engine, source, uno, sale("gap-1"))
    other = register_sale(engine, source, dos, sale("gap-1"))  # another program's own id
    assert (again.duplicado, again.folio) == (True, first.folio)
    assert not other.duplicado
    assert other.folio == first.folio + 2  # first.folio + 1 went to the duplicate
    with engine.connect() as conn:
        ids = set(conn.execute(select(ventas.c.id)).scalars())
    assert {first.folio, other.folio} <= ids
    assert first.folio + 1 not in ids


def test_the_folio_stays_an_int32_json_number(engine: Engine) -> None:
    with engine.connect() as conn:
        sequence = conn.execute(
            text(
                "SELECT data_type::text, max_value FROM pg_sequences "
                "WHERE sequencename = 'ventas_folio_seq'"
            )
        ).one()
        column = conn.execute(
            text(
                "SELECT data_type FROM information_schema.columns "
                "WHERE table_name = 'ventas' AND column_name = 'id'"
            )
        ).scalar_one()
    assert tuple(sequence) == ("integer", INT32_MAX)
    assert column == "integer"
    field = pb.RegisterTxData.DESCRIPTOR.fields_by_name["tx"]
    assert field.type == FieldDescriptor.TYPE_INT32
    printed = json.loads(json_format.MessageToJson(pb.RegisterTxData(tx=INT32_MAX)))
    assert printed["tx"] == INT32_MAX  # a number, not a string


# ------------------------------------------------ on the last expand revision, then 0020


def test_this_version_works_on_the_expand_revision_and_its_rows_pass_the_contract(
    create_database: Callable[[], str],
) -> None:
    """On a database at the last expand revision (the previous release's schema plus the
    new keys and functions: the contract's down_revision), this
    version's writes (fixture, sales, both redemptions, adjustment, void, the rate limit,
    the wallet sender) work and name their program; the contract (0020) then applies."""
    url = create_database()
    upgrade(url, EXPAND)
    engine = make_engine(url, pool_size=4)
    try:
        callers = load_world(engine)
        uno = callers["uno"]
        source = Folios(engine)
        first = register_sale(engine, source, uno, sale("e-1", centavos=50_000))
        assert register_sale(engine, source, uno, sale("e-1", centavos=50_000)).duplicado
        assert resolve_fan(engine, uno, parse_fan_ref("f001"), datetime.now(UTC)).fan.puntos == 50
        assert redeem_code(engine, uno, "C-0001", redemption()).puntos_otorgados == 7
        batch = redeem_codes(engine, uno, ["C-0001", "C-0005", "C-0002"], redemption())
        assert (batch.resumen.canjeados, batch.resumen.duplicados) == (2, 1)
        run_in_uow(engine, adjust_points, "uno", FAN_IDS[1], 3, "ajuste")
        run_in_uow(engine, void_sale, "uno", first.folio, "cancelada")
        counters = PgCounters(engine)
        key = LimitKey(uno.programa_id, uno.clave_id)
        assert counters.reserve(key, 3, 10, slack_calls=2).granted == 3
        counters.settle([(key, Refund(0, 0, 0))])
        report = send_pending(engine, LocalProvider(engine))
        assert report.delivered >= 1
        assert_ledger_consistent(engine)
        with engine.connect() as conn:
            for table in ("movimientos", "wallet_pases", "wallet_entregas", "limite_llamadas"):
                assert (
                    conn.execute(
                        text(f"SELECT count(*) FROM {table} WHERE programa_id IS NULL")
                    ).scalar_one()
                    == 0
                )
            # The other program is untouched: its copies of the same texts, its fans.
            assert (
                conn.execute(
                    select(codigos.c.estado).where(
                        codigos.c.programa_id == "dos", codigos.c.estado != "asignado"
                    )
                ).all()
                == []
            )
            assert (
                conn.execute(
                    select(fans.c.puntos).where(fans.c.programa_id == "dos", fans.c.puntos != 0)
                ).all()
                == []
            )
            assert (
                conn.execute(
                    select(movimientos.c.id).where(movimientos.c.programa_id == "dos")
                ).all()
                == []
            )
        assert upgrade(url, contract=True) == "0020"
        assert register_sale(engine, source, uno, sale("e-2")).folio > first.folio
        assert_ledger_consistent(engine)
    finally:
        engine.dispose()
