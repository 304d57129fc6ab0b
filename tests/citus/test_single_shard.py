"""Every hot statement but the sale, the redemptions and the deposit reaches ONE shard on the
cluster (docs/citus.md): run from the coordinator with real parameters, as store/ sends it
(the texts are store/'s own, never copied here), its `EXPLAIN` is one task (`Task Count:
1`: a router statement, or a delegated call) on the node holding the program's rows, and
a function call is delegated ("pushing down the function call").

- the key check (store/keys.py): `claves` and `programas` are reference tables, so the
  one task runs on the coordinator's own placement, no worker asked (its EXPLAIN names a
  worker's placement, the execution is local: `citus.log_local_commands`);
- `fan/resolve` in its five forms (store/resolve.py over store/fan_lookup.py): QR URL,
  e-mail, and the text form's three readings (Fan ID, coupon code, raw QR token);
- the promotions listing (store/promos.py);
- the roster page (store/roster.py: a delegated function);
- the call limit's request and settlement (store/rate_limit.py: delegated functions, on the
  node of the key's `limite_llamadas` shard, a colocation group of its own)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from loyalty_grpc.domain.fan_ref import Forma, parse_fan_ref
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.fan_lookup import lookup_params
from loyalty_grpc.store.keys import _AUTHENTICATE
from loyalty_grpc.store.promos import listing_query
from loyalty_grpc.store.rate_limit import _RESERVE, _SETTLE
from loyalty_grpc.store.resolve import RESOLVE, fan_and_promo
from loyalty_grpc.store.roster import PAGE
from loyalty_grpc.store.tables import claves
from loyalty_grpc.store.uow import run_in_uow
from tests.citus.cluster import connect
from tests.citus.test_cluster import shard_of

PROGRAM = "unshard"
HOY = date(2026, 1, 1)
PUSHED_DOWN = "pushing down the function call"
HASH = secrets.token_bytes(32)


@pytest.fixture(scope="module")
def clave_id(engine: Engine) -> int:
    """A program with two fans, a promotion with a code delivered to one of them, and a key."""
    fans = [
        {
            "id": f"UNO0{i}",
            "nombre": "Fan",
            "correo": f"uno{i}@example.com",
            "socio_desde": 2020,
            "qr_token": f"tokUno{i}",
        }
        for i in (1, 2)
    ]
    document = {
        "programas": [
            {
                "id": PROGRAM,
                "nombre": "Club Un Shard",
                "tasa_puntos": "1",
                "fans": fans,
                "promos": [
                    {
                        "nombre": "Promo",
                        "vigencia_fin": "2099-12-31",
                        "codigos": [
                            {"codigo": "UN-SHARD-0001", "estado": "asignado", "fan": "UNO02"}
                        ],
                    }
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))
    with engine.begin() as conn:
        return int(
            conn.execute(
                insert(claves)
                .values(
                    programa_id=PROGRAM,
                    hash=HASH,
                    modo="vivo",
                    integracion="Caja",
                    sufijo="abcd",
                )
                .returning(claves.c.id)
            ).scalar_one()
        )


@pytest.fixture(scope="module")
def coordinator(db_url: str, clave_id: int) -> Iterator[Any]:
    with connect(db_url) as conn:
        yield conn


def explain(conn: Any, statement: str, params: dict[str, Any]) -> str:
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + statement, params).fetchall())


def one_task_on(plan: str, port: int) -> None:
    assert "Task Count: 1\n" in plan + "\n", plan
    assert "Distributed Subplan" not in plan, plan
    assert f"port={port}" in plan, plan


def delegated(conn: Any, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The call's rows; fails unless Citus pushed it down to a worker."""
    notices: list[str] = []

    def keep(diagnostic: Any) -> None:
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute("SET client_min_messages = debug1")
        rows = conn.execute(statement, params).fetchall()
    finally:
        conn.execute("RESET client_min_messages")
        conn.remove_notice_handler(keep)
    assert any(PUSHED_DOWN in n for n in notices), notices
    return list(rows)


def test_the_key_check_runs_on_the_coordinators_reference_placement(coordinator: Any) -> None:
    plan = explain(coordinator, _AUTHENTICATE, {"hash": HASH})
    assert "Task Count: 1\n" in plan, plan
    notices: list[str] = []

    def keep(diagnostic: Any) -> None:
        notices.append(diagnostic.message_primary or "")

    coordinator.add_notice_handler(keep)
    try:
        coordinator.execute("SET citus.log_local_commands = on")
        coordinator.execute("SET citus.log_remote_commands = on")
        coordinator.execute("SET client_min_messages = log")
        row = coordinator.execute(_AUTHENTICATE, {"hash": HASH}).fetchone()
    finally:
        coordinator.execute("RESET ALL")
        coordinator.remove_notice_handler(keep)
    assert row is not None
    assert row[1] == PROGRAM
    assert any("executing the command locally" in n for n in notices), notices
    assert not any("issuing" in n for n in notices), notices


@pytest.mark.parametrize(
    ("value", "forma", "fan_id"),
    [
        ("https://x.example/fan/v/tokUno1", Forma.QR_URL, "UNO01"),
        ("UNO1@Example.com", Forma.CORREO, "UNO01"),
        ("uno01", Forma.TEXTO, "UNO01"),  # a Fan ID
        ("un-shard-0001", Forma.TEXTO, "UNO02"),  # a coupon code delivered to a fan
        ("tokUno2", Forma.TEXTO, "UNO02"),  # a raw QR token
    ],
)
def test_every_form_of_resolve_is_one_router_statement(
    engine: Engine, coordinator: Any, value: str, forma: Forma, fan_id: str
) -> None:
    ref = parse_fan_ref(value)
    assert ref.forma is forma
    params = {**lookup_params(PROGRAM, ref), "hoy": HOY}
    plan = explain(coordinator, RESOLVE[forma], params)
    one_task_on(plan, shard_of(coordinator, "fans", PROGRAM).port)
    row = fan_and_promo(engine, PROGRAM, ref, HOY)
    assert row is not None
    assert row[1] == fan_id


def test_the_promotions_listing_is_one_router_statement(engine: Engine, coordinator: Any) -> None:
    compiled = listing_query(PROGRAM).compile(dialect=engine.dialect)
    plan = explain(coordinator, str(compiled), dict(compiled.params))
    one_task_on(plan, shard_of(coordinator, "promos", PROGRAM).port)


def test_the_roster_page_is_a_delegated_call(coordinator: Any) -> None:
    params = {"programa": PROGRAM, "fase": None, "xid": None, "pk": None, "limite": 10}
    one_task_on(explain(coordinator, PAGE, params), shard_of(coordinator, "fans", PROGRAM).port)
    rows = delegated(coordinator, PAGE, params)
    assert len(rows) == 1 + 2  # the state, then both fans


def test_the_call_limits_request_and_settlement_are_delegated_to_the_keys_shard(
    coordinator: Any, clave_id: int
) -> None:
    port = shard_of(coordinator, "limite_llamadas", PROGRAM).port
    request = {
        "programa": PROGRAM,
        "clave_id": clave_id,
        "pedidas": 3,
        "limite": 600,
        "holgura": 8,
        "segundo": None,
        "dev_segundo": None,
        "dev": 0,
        "dev_reservadas": 0,
    }
    one_task_on(explain(coordinator, _RESERVE, request), port)
    ((segundo, cuentas, _reservas, concedidas, _ahora),) = delegated(
        coordinator, _RESERVE, request
    )  # the key's first request: the row is inserted
    assert concedidas == 3
    again = delegated(coordinator, _RESERVE, {**request, "dev_segundo": segundo, "dev": 2})
    assert again[0][3] == 3
    assert sum(again[0][1]) == sum(cuentas) - 2 + 3
    settlement = {
        "programa": PROGRAM,
        "claves": [clave_id],
        "segundos": [again[0][0]],
        "cuantas": [1],
        "reservadas": [2],
    }
    one_task_on(explain(coordinator, _SETTLE, settlement), port)
    assert delegated(coordinator, _SETTLE, settlement) == [(1,)]
