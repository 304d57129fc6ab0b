"""POST /api/v1/tx through Envoy: every field, alias and format; points; idempotency
(sequential and 50 concurrent identical calls); test keys; every error."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2
from sqlalchemy import func, select

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.backoffice.points import void_sale
from loyalty_grpc.store.tables import fans, movimientos, ventas, wallet_entregas
from loyalty_grpc.store.uow import run_in_uow
from loyalty_grpc.wallet import LocalProvider, send_pending
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error, auth

# Rate 100 points per peso: puntos_otorgados == the amount in cents, so every amount
# format can be checked through the response.
CENTS_PROGRAM = "txc"
POINTS_PROGRAM = "txp"
_ids = itertools.count()


def fan(fan_id: str, puntos: int = 0, **extra: object) -> dict[str, object]:
    return {
        "id": fan_id,
        "nombre": f"Fan {fan_id}",
        "correo": f"{fan_id.lower()}@example.com",
        "socio_desde": 2020,
        "temporadas": 1,
        "qr_token": f"qr{fan_id}",
        "puntos": puntos,
        **extra,
    }


@pytest.fixture(scope="module")
def cents_keys(stack: Stack) -> dict[str, str]:
    return stack.program(CENTS_PROGRAM, tasa="100", fans=[fan("TXC01")])


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    return stack.program(
        POINTS_PROGRAM,
        tasa="0.1",
        fans=[
            fan("TXP01"),
            fan("TXP02"),
            fan("TXP03", 500),
            fan("TXP04"),
            fan("TXP05"),
            fan("TXP09", estado="baja", baja_motivo="mudanza"),
        ],
    )


def new_id() -> str:
    return f"venta-{next(_ids)}-{datetime.now(UTC).timestamp()}"


def tx(http: httpx.Client, key: str, **body: object) -> httpx.Response:
    return http.post("/api/v1/tx", headers=auth(key), json=body)


def ok(response: httpx.Response) -> dict[str, object]:
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()["data"]
    return data


def balance(stack: Stack, programa: str, fan_id: str) -> int:
    with stack.engine.connect() as conn:
        return int(
            conn.execute(
                select(fans.c.puntos).where(fans.c.programa_id == programa, fans.c.fan_id == fan_id)
            ).scalar_one()
        )


def stored_sale(stack: Stack, folio: int) -> dict[str, object]:
    with stack.engine.connect() as conn:
        return dict(conn.execute(select(ventas).where(ventas.c.id == folio)).one()._mapping)


@pytest.mark.parametrize(
    ("amount", "cents"),
    [
        ({"importe": 100}, 10000),
        ({"importe": 12.5}, 1250),
        ({"importe": 30.000000000000004}, 3000),
        ({"importe": 0.1}, 10),
        ({"importe": "1,234.56"}, 123456),
        ({"importe": "1.234,56"}, 123456),
        ({"importe": "$ 1,234.56"}, 123456),
        ({"importe": "$1234"}, 123400),
        ({"importe": "MX$ 99.90"}, 9990),
        ({"importe": "MXN 1.234,56"}, 123456),
        ({"importe": "12,5"}, 1250),
        ({"importe": "1,234"}, 123400),
        ({"importe": "1.234"}, 123400),
        ({"importe": "1,234,567.89"}, 123456789),
        ({"importe": "250"}, 25000),
        ({"importe_centavos": 1999}, 1999),
        ({"centavos": 5}, 5),
        ({"amount_cents": 777}, 777),
        ({"importe": "19.99", "importe_centavos": 1999}, 1999),
    ],
)
def test_amount_formats(stack, http, cents_keys, amount, cents):
    data = ok(tx(http, cents_keys["todo"], id_externo=new_id(), fan="TXC01", **amount))
    assert data["puntos_otorgados"] == cents
    assert stored_sale(stack, int(str(data["tx"])))["importe_centavos"] == cents


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("2025-11-20T18:30:00Z", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("2025-11-20T12:30:00-06:00", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("2025-11-20T18:30:00", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("2025-11-20 18:30:00", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        (1763663400, datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        (1763663400000, datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("1763663400", datetime(2025, 11, 20, 18, 30, tzinfo=UTC)),
        ("2025-11-20T18:30:00.250+00:00", datetime(2025, 11, 20, 18, 30, 0, 250000, tzinfo=UTC)),
    ],
)
def test_timestamp_formats(stack, http, keys, ts, expected):
    data = ok(tx(http, keys["todo"], id_externo=new_id(), fan="TXP04", importe=1, ts=ts))
    assert stored_sale(stack, int(str(data["tx"])))["ts"] == expected


def test_sale_without_ts_takes_server_time(stack, http, keys):
    data = ok(tx(http, keys["todo"], id_externo=new_id(), fan="TXP04", importe=1))
    stored = stored_sale(stack, int(str(data["tx"])))["ts"]
    assert isinstance(stored, datetime)
    assert abs(datetime.now(UTC) - stored) < timedelta(minutes=1)


def test_points_balance_and_response_shape(stack, http, keys):
    before = balance(stack, POINTS_PROGRAM, "TXP01")
    response = tx(http, keys["todo"], id_externo=new_id(), fan="txp 01", importe="123.45")
    data = ok(response)
    assert list(data) == [
        "duplicado",
        "tx",
        "puntos_otorgados",
        "saldo",
        "fan",
        "puntos_acreditados",
    ]
    assert data["duplicado"] is False
    assert isinstance(data["tx"], int)
    assert data["puntos_otorgados"] == 12  # floor(123.45 × 0.1)
    assert data["puntos_acreditados"] == 12
    assert data["saldo"] == before + 12 == balance(stack, POINTS_PROGRAM, "TXP01")
    assert data["fan"] == {"id": "TXP01", "correo": "txp01@example.com"}
    assert response.content.startswith(b'{"ok":true,"data":{"duplicado":false,"tx":')


def test_correo_only_with_fan_leer(http, keys):
    data = ok(tx(http, keys["tx"], id_externo=new_id(), fan="TXP01", importe=10))
    assert data["fan"] == {"id": "TXP01"}


def test_aliases_and_labels(stack, http, keys):
    for id_field, fan_field, fan_value in [
        ("id", "fan_id", "TXP02"),
        ("tx_id", "qr", "qrTXP02"),
        ("id_externo", "codigo", "TXP02"),
    ]:
        data = ok(
            tx(
                http,
                keys["todo"],
                importe=10,
                caja="Caja 7",
                sucursal="Estadio Norte",
                **{id_field: new_id(), fan_field: fan_value},
            )
        )
        assert data["fan"] == {"id": "TXP02", "correo": "txp02@example.com"}
        sale = stored_sale(stack, int(str(data["tx"])))
        assert (sale["terminal"], sale["sitio"]) == ("Caja 7", "Estadio Norte")
    data = ok(
        tx(
            http,
            keys["todo"],
            id_externo=new_id(),
            fan="TXP02",
            importe=10,
            terminal="T1",
            sitio="S1",
            moneda="mxn",
        )
    )
    sale = stored_sale(stack, int(str(data["tx"])))
    assert (sale["terminal"], sale["sitio"], sale["moneda"]) == ("T1", "S1", "MXN")


def test_duplicate_replays_the_original(stack, http, keys):
    id_externo = new_id()
    first = ok(tx(http, keys["todo"], id_externo=id_externo, fan="TXP03", importe=50))
    assert (first["puntos_otorgados"], first["puntos_acreditados"]) == (5, 5)
    ok(tx(http, keys["todo"], id_externo=new_id(), fan="TXP03", importe=100))  # +10
    again = ok(tx(http, keys["todo"], id_externo=id_externo, fan="qrTXP03", importe="50.00"))
    assert again == {
        **first,
        "duplicado": True,
        "puntos_otorgados": 0,
        "saldo": balance(stack, POINTS_PROGRAM, "TXP03"),
    }
    assert again["saldo"] == int(str(first["saldo"])) + 10
    assert (again["puntos_otorgados"], again["puntos_acreditados"]) == (0, 5)


def test_a_retry_over_native_grpc_and_http_says_what_the_sale_credited(stack, http, keys):
    """issue 23 §2: the first answer is lost, the till retries; native gRPC callers get the
    same field. Voided by the back office in between, the sale still says what it credited
    (what the lost answer said); `saldo` shows the void."""
    id_externo = new_id()
    request = pb.RegisterTxRequest(
        id_externo=id_externo,
        fan="TXP04",
        importe=struct_number(123.45),
    )
    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.PosServiceStub(channel)
        md = (("authorization", f"Bearer {keys['todo']}"),)
        first = stub.RegisterTx(request, metadata=md).data
        assert (first.duplicado, first.puntos_otorgados, first.puntos_acreditados) == (
            False,
            12,
            12,
        )
        retry = stub.RegisterTx(request, metadata=md).data
        assert (retry.duplicado, retry.tx, retry.puntos_otorgados, retry.puntos_acreditados) == (
            True,
            first.tx,
            0,
            12,
        )
        run_in_uow(stack.engine, void_sale, POINTS_PROGRAM, first.tx, "devolución")
        after_void = stub.RegisterTx(request, metadata=md).data
        assert (after_void.duplicado, after_void.puntos_acreditados) == (True, 12)
        assert after_void.saldo == first.saldo - 12 == balance(stack, POINTS_PROGRAM, "TXP04")
    body = {"id_externo": id_externo, "fan": "TXP04", "importe": 123.45}
    over_http = ok(tx(http, keys["todo"], **body))
    assert (over_http["duplicado"], over_http["puntos_otorgados"]) == (True, 0)
    assert (over_http["puntos_acreditados"], over_http["saldo"]) == (12, after_void.saldo)


def struct_number(value: float) -> struct_pb2.Value:
    return struct_pb2.Value(number_value=value)


@pytest.mark.parametrize("change", [{"fan": "TXP02"}, {"importe": 51}])
def test_conflicting_reuse_of_id_externo(stack, http, keys, change):
    id_externo = new_id()
    ok(tx(http, keys["todo"], id_externo=id_externo, fan="TXP03", importe=50))
    before = balance(stack, POINTS_PROGRAM, "TXP03")
    body = {"id_externo": id_externo, "fan": "TXP03", "importe": 50, **change}
    error = assert_error(tx(http, keys["todo"], **body), CodigoError.ID_EXTERNO_EN_CONFLICTO)
    assert "folio" in error["detalle"]
    assert balance(stack, POINTS_PROGRAM, "TXP03") == before


def test_test_key_credits_nothing_in_its_own_namespace(stack, http, keys):
    id_externo = new_id()
    before = balance(stack, POINTS_PROGRAM, "TXP05")
    test_sale = ok(tx(http, keys["prueba"], id_externo=id_externo, fan="TXP05", importe=1000))
    assert (test_sale["duplicado"], test_sale["puntos_otorgados"]) == (False, 0)
    assert test_sale["puntos_acreditados"] == 0
    assert test_sale["saldo"] == before
    live = ok(tx(http, keys["todo"], id_externo=id_externo, fan="TXP05", importe=1000))
    assert (live["duplicado"], live["puntos_otorgados"], live["puntos_acreditados"]) == (
        False,
        100,
        100,
    )
    assert live["tx"] != test_sale["tx"]
    replay = ok(tx(http, keys["prueba"], id_externo=id_externo, fan="TXP05", importe=1000))
    assert (replay["duplicado"], replay["tx"], replay["saldo"]) == (
        True,
        test_sale["tx"],
        before + 100,
    )
    assert (replay["puntos_otorgados"], replay["puntos_acreditados"]) == (0, 0)
    assert stored_sale(stack, int(str(test_sale["tx"])))["modo"] == "prueba"


def test_fifty_concurrent_identical_calls_credit_once(stack, keys):
    id_externo = new_id()
    before = balance(stack, POINTS_PROGRAM, "TXP01")
    results: list[httpx.Response] = []
    barrier = threading.Barrier(50)

    def call() -> None:
        with stack.http() as client:
            barrier.wait()
            results.append(tx(client, keys["todo"], id_externo=id_externo, fan="TXP01", importe=80))

    threads = [threading.Thread(target=call) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    datas = [ok(r) for r in results]
    assert len(datas) == 50
    assert sorted(bool(d["duplicado"]) for d in datas) == [False] + [True] * 49
    # Every answer, the first and the 49 that waited for it, says what the sale credited.
    assert {d["puntos_acreditados"] for d in datas} == {8}
    assert len({d["tx"] for d in datas}) == 1
    assert sum(int(str(d["puntos_otorgados"])) for d in datas) == 8
    assert balance(stack, POINTS_PROGRAM, "TXP01") == before + 8
    with stack.engine.connect() as conn:
        entries = conn.execute(
            select(func.count())
            .select_from(movimientos)
            .where(movimientos.c.venta_id == datas[0]["tx"])
        ).scalar_one()
    assert entries == 1


@pytest.mark.parametrize(
    ("body", "codigo", "hint"),
    [
        ({"fan": "TXP01", "importe": 10}, CodigoError.CAMPO_REQUERIDO, "id_externo"),
        ({"id_externo": "x", "importe": 10}, CodigoError.CAMPO_REQUERIDO, "fan"),
        ({"id_externo": "x", "fan": "TXP01"}, CodigoError.CAMPO_REQUERIDO, "importe"),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": "abc"},
            CodigoError.IMPORTE_INVALIDO,
            "importe",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": -5},
            CodigoError.IMPORTE_INVALIDO,
            "importe",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": 12.345},
            CodigoError.IMPORTE_INVALIDO,
            "importe",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": "1.2345"},
            CodigoError.IMPORTE_INVALIDO,
            "?",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": True},
            CodigoError.IMPORTE_INVALIDO,
            "importe",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe_centavos": 10.5},
            CodigoError.IMPORTE_INVALIDO,
            "importe_centavos",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": "10", "centavos": 999},
            CodigoError.IMPORTE_INVALIDO,
            "centavos",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": 10, "ts": "mañana"},
            CodigoError.TS_INVALIDO,
            "ts",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": 10, "ts": "2999-01-01T00:00:00Z"},
            CodigoError.TS_INVALIDO,
            "ts",
        ),
        (
            {"id_externo": "x", "fan": "TXP01", "importe": 10, "moneda": "USD"},
            CodigoError.MONEDA_NO_SOPORTADA,
            "MXN",
        ),
        ({"id_externo": "x", "fan": "NADIE", "importe": 10}, CodigoError.FAN_NO_ENCONTRADO, ""),
        ({"id_externo": "x", "fan": "TXP09", "importe": 10}, CodigoError.FAN_NO_ENCONTRADO, ""),
        (
            {"id_externo": "x", "id": "y", "fan": "TXP01", "importe": 10},
            CodigoError.SOLICITUD_INVALIDA,
            "id_externo",
        ),
        (
            {"id_externo": 5, "fan": "TXP01", "importe": 10},
            CodigoError.SOLICITUD_INVALIDA,
            "id_externo",
        ),
        (
            {"id_externo": "x" * 129, "fan": "TXP01", "importe": 10},
            CodigoError.SOLICITUD_INVALIDA,
            "id_externo",
        ),
    ],
)
def test_errors_change_nothing(stack, http, keys, body, codigo, hint):
    before = balance(stack, POINTS_PROGRAM, "TXP01")
    with stack.engine.connect() as conn:
        sales_before = conn.execute(select(func.count()).select_from(ventas)).scalar_one()
    error = assert_error(tx(http, keys["todo"], **body), codigo)
    assert hint in error["detalle"]
    assert balance(stack, POINTS_PROGRAM, "TXP01") == before
    with stack.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ventas)).scalar_one() == sales_before


def test_permission(http, keys):
    assert_error(
        tx(http, keys["ping"], id_externo="x", fan="TXP01", importe=1), CodigoError.PERMISO_DENEGADO
    )


def test_a_sale_refreshes_the_wallet_pass_once_with_the_latest_balance(stack, http, keys):
    """The sender running beside the server delivers the sale's new balance exactly once;
    nothing is left pending afterwards."""
    with stack.engine.connect() as conn:
        fan_pk = conn.execute(
            select(fans.c.pk).where(fans.c.programa_id == POINTS_PROGRAM, fans.c.fan_id == "TXP05")
        ).scalar_one()

    def deliveries() -> list[int]:
        with stack.engine.connect() as conn:
            return [
                int(s)
                for s in conn.execute(
                    select(wallet_entregas.c.saldo)
                    .where(wallet_entregas.c.fan_pk == fan_pk)
                    .order_by(wallet_entregas.c.id)
                ).scalars()
            ]

    already = len(deliveries())
    data = ok(tx(http, keys["todo"], id_externo=new_id(), fan="TXP05", importe=420))
    deadline = time.monotonic() + 30
    while len(deliveries()) == already and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deliveries()[already:] == [data["saldo"]]
    assert send_pending(stack.engine, LocalProvider(stack.engine)).delivered == 0
    assert deliveries()[already:] == [data["saldo"]]
    # A test-key sale moves no points and refreshes nothing.
    ok(tx(http, keys["prueba"], id_externo=new_id(), fan="TXP05", importe=420))
    assert send_pending(stack.engine, LocalProvider(stack.engine)).delivered == 0
    assert deliveries()[already:] == [data["saldo"]]
