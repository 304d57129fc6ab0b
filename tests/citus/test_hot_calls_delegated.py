"""Each hot write of migration 0014 is one call Citus runs on the node of the program's
shard: the sale (each form of the fan's value, new and duplicate), the single redemption
(autocommit), a batch's redemption inside its transaction after `lock_copies`
(force_delegation) and the deposit inside its unit of work after the promotion's FOR SHARE
(force_delegation). Proved by Citus's own debug1 notice ("pushing down …"), sent to the
client; the sale's replay and what redemptions credited are router statements (EXPLAIN:
one task). Calls made through the store's and services' own functions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from sqlalchemy import Engine, event

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.codes import CodeBatch, PromoRef
from loyalty_grpc.domain.fan_ref import parse_fan_ref
from loyalty_grpc.services.pos.codes import deposit_codes
from loyalty_grpc.store import redeem as redeem_store
from loyalty_grpc.store import sale as sale_store
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.redeem import ByCopies, ByText, RedeemValues
from loyalty_grpc.store.sale import SaleValues
from tests.integration.test_by_program import load_world

PUSHED = "pushing down"
notices: list[str] = []


@pytest.fixture(scope="module")
def engine(db_url: str) -> Iterator[Engine]:
    """One connection whose every statement reports Citus's debug1 notices."""
    eng = make_engine(db_url, pool_size=1)

    @event.listens_for(eng, "connect")
    def _debug(dbapi_connection: psycopg.Connection, _record: object) -> None:
        dbapi_connection.add_notice_handler(lambda d: notices.append(d.message_primary or ""))

    yield eng
    eng.dispose()


@pytest.fixture(scope="module")
def world(engine: Engine) -> dict[str, Caller]:
    return load_world(engine)


def _delegated(call: object) -> list[str]:
    """The debug1 notices of `call()` (a function of no arguments)."""
    notices.clear()
    assert callable(call)
    call()
    got = list(notices)
    notices.clear()
    return got


@pytest.fixture(autouse=True)
def _debug1(engine: Engine, world: dict[str, Caller]) -> Iterator[None]:
    with engine.connect() as conn:
        conn.exec_driver_sql("SET SESSION client_min_messages = debug1")
        conn.commit()
    yield
    with engine.connect() as conn:
        conn.exec_driver_sql("RESET client_min_messages")
        conn.commit()


def _sale(caller: Caller, id_externo: str, folio: int) -> SaleValues:
    return SaleValues(
        folio=folio,
        programa=caller.programa_id,
        modo="vivo",
        id_externo=id_externo,
        centavos=10_000,
        moneda="MXN",
        terminal=None,
        sitio=None,
        ts=datetime.now(UTC),
        puntos=10,
        clave_id=caller.clave_id,
    )


@pytest.mark.parametrize(
    ("forma", "value"),
    [
        ("qr_url", "https://x.example/f/v/qr-f001"),
        ("correo", "f001@example.com"),
        ("texto", "F002"),
    ],
)
def test_a_sale_is_one_delegated_call_new_or_duplicate(
    engine: Engine, world: dict[str, Caller], forma: str, value: str
) -> None:
    caller = world["uno"]
    folio = {"qr_url": 1001, "correo": 1003, "texto": 1005}[forma]
    got = _delegated(
        lambda: sale_store.insert_sale(engine, _sale(caller, forma, folio), parse_fan_ref(value))
    )
    assert any(PUSHED in n for n in got), got
    again = _delegated(
        lambda: sale_store.insert_sale(
            engine, _sale(caller, forma, folio + 1), parse_fan_ref(value)
        )
    )
    assert any(PUSHED in n for n in again), again


def _values(caller: Caller) -> RedeemValues:
    now = datetime.now(UTC)
    return RedeemValues(caller.programa_id, True, caller.clave_id, "T1", now, now)


def test_a_single_redemption_is_one_delegated_call(
    engine: Engine, world: dict[str, Caller]
) -> None:
    caller = world["uno"]
    got = _delegated(lambda: redeem_store.redeem(engine, _values(caller), ByText("C-0003")))
    assert any(PUSHED in n for n in got), got


def test_a_batch_is_delegated_inside_its_transaction(
    engine: Engine, world: dict[str, Caller]
) -> None:
    caller = world["uno"]
    rows: list[redeem_store.RedeemRow] = []

    def batch() -> None:
        with engine.begin() as conn:
            _copias, locked = redeem_store.lock_copies(
                conn, caller.programa_id, ["C-0005", "C-0006"]
            )
            rows.extend(redeem_store.redeem(conn, _values(caller), ByCopies(tuple(locked))))
            redeem_store.credited_by_redemptions(conn, caller.programa_id, list(locked))

    got = _delegated(batch)
    assert any(PUSHED in n and "transaction" in n for n in got), got
    assert [r.credited for r in rows] == [7, 7]


def test_a_deposit_is_delegated_inside_its_unit_of_work(
    engine: Engine, world: dict[str, Caller]
) -> None:
    caller = world["dos"]
    got = _delegated(
        lambda: deposit_codes(
            engine,
            caller.programa_id,
            PromoRef(None, "Promo"),
            CodeBatch(codigos=("D-1", "D-2"), leidos=2),
        )
    )
    assert any(PUSHED in n and "transaction" in n for n in got), got


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (sale_store.ORIGINAL, {"modo": "vivo", "id_externo": "qr_url"}),
        (redeem_store.CREDITED, {"ids": [1, 2]}),
    ],
    ids=["sale ORIGINAL", "CREDITED"],
)
def test_the_replays_are_router_statements(
    engine: Engine, world: dict[str, Caller], sql: str, params: dict[str, object]
) -> None:
    with engine.connect() as conn:
        plan = "\n".join(
            row[0]
            for row in conn.exec_driver_sql(
                "EXPLAIN " + sql, {"programa": world["uno"].programa_id, **params}
            )
        )
    assert "Task Count: 1" in plan, plan
