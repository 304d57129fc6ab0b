"""The typed Python client (loyalty_grpc.client) against the real server over real channels
on a real PostgreSQL with the demo data: every PosService operation returns plain typed
values (the typed fields end to end), a failure is LoyaltyCallError with the ErrorInfo's
codigo, mensaje and detalle and is not retried, a rate limit's RetryInfo is honoured (the
client does not retry before it), and a call retries through a real outage (the server
stopped, then started again on the same port under the client) with the same request.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine

from loyalty_grpc.api.server import GrpcServer, ServerSettings, build_server
from loyalty_grpc.client import LoyaltyCallError, PosClient, RetryPolicy
from loyalty_grpc.client.retry import Clock
from loyalty_grpc.runtime.cli.demo import demo_document
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.uow import run_in_uow
from tests.support import ADMIN_TOKEN, free_port

KEY = "lp_vivo_DemoCajaPrincipalTodos0000001"
PING_ONLY = "lp_vivo_DemoKioskoPingSinPermisos0001"


@pytest.fixture(scope="module")
def demo(engine: Engine) -> None:
    run_in_uow(engine, apply_fixture, demo_document())


class Sleeps:
    """The client's sleeps, really slept, with a hook run before the first."""

    def __init__(self, before_first: Any = None) -> None:
        self.slept: list[float] = []
        self._before_first = before_first

    def __call__(self, seconds: float) -> None:
        if not self.slept and self._before_first is not None:
            self._before_first()
        self.slept.append(seconds)
        Clock().sleep(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def pos(server: GrpcServer, demo: None, sleeps: Sleeps) -> Iterator[PosClient]:
    with PosClient.connect(f"127.0.0.1:{server.port}", KEY, clock=Clock(sleep=sleeps)) as client:
        yield client


def test_ping(pos):
    ping = pos.ping()
    assert (ping.integracion, ping.programa, ping.modo) == ("Caja Principal", "Club Demo", "vivo")
    assert "tx:escribir" in ping.permisos
    assert abs(ping.hora - datetime.now(UTC)) < timedelta(minutes=5)


def test_resolve_fan_with_and_without_a_promotion(pos):
    found = pos.resolve_fan("DEMO0001")
    assert found.fan.id == "DEMO0001"
    assert found.fan.correo == "maria.lopez@example.com"
    assert found.promo is not None
    assert (found.promo.codigo, found.promo.vigencia_fin) == ("HD-0003", date(2099, 12, 31))
    assert pos.resolve_fan("DEMO0003").promo is None


def test_register_sale_with_typed_amounts_and_time(pos):
    moment = datetime.now(UTC) - timedelta(minutes=1)
    sale = pos.register_sale("py-1", "DEMO0002", centavos=12550, ts=moment, terminal="Caja 9")
    assert (sale.duplicado, sale.puntos_otorgados, sale.fan_id) == (False, 12, "DEMO0002")
    again = pos.register_sale("py-1", "DEMO0002", importe=Decimal("125.50"))
    assert (again.duplicado, again.tx) == (True, sale.tx)
    # A retry shows what the sale credited when it was applied.
    assert (again.puntos_otorgados, again.puntos_acreditados) == (0, sale.puntos_acreditados)
    assert sale.puntos_acreditados == sale.puntos_otorgados
    assert pos.register_sale("py-2", "DEMO0002", importe="$ 10.00").puntos_otorgados == 1


def test_a_failure_is_one_exception_with_the_error_info_and_is_not_retried(pos, sleeps):
    with pytest.raises(LoyaltyCallError) as caught:
        pos.resolve_fan("NADIE0000")
    error = caught.value
    assert (error.status, error.codigo) == (grpc.StatusCode.NOT_FOUND, "fan_no_encontrado")
    assert error.mensaje == "No se encontró al fan."
    assert error.detalle.startswith("ningún fan activo del programa coincide")
    assert "NADIE0000" not in error.detalle
    assert (error.attempts, sleeps.slept) == (1, [])
    with pytest.raises(LoyaltyCallError) as caught:
        pos.register_sale("py-3", "DEMO0002", centavos=1, importe="2")
    assert caught.value.codigo == "importe_invalido"


def test_redeem_single_and_batch(pos):
    single = pos.redeem("HD-0005", ts=datetime.now(UTC))
    assert (single.codigo, single.duplicado, single.promo) == ("HD-0005", True, "2x1 Hot Dog")
    batch = pos.redeem_batch(["HD-0005", "HD-0006", "HD-9999"])
    assert (batch.recibidos, batch.canjeados, batch.duplicados, batch.rechazados) == (3, 0, 1, 2)
    first, second, third = batch.resultados
    assert first.ok
    assert first.redemption is not None
    assert first.redemption.correo == "lupita.martinez@example.com"
    assert first.redemption.puntos_acreditados == single.puntos_acreditados
    assert (first.redemption.duplicado, first.redemption.puntos_otorgados) == (True, 0)
    assert (second.ok, second.error_codigo) == (False, "codigo_liberado")
    assert (third.error_codigo, third.error_mensaje) == (
        "codigo_no_encontrado",
        "No se encontró el código.",
    )


def test_promos_codes_and_roster(pos):
    promos = {p.nombre: p for p in pos.list_promos()}
    hot_dog = promos["2x1 Hot Dog"]
    assert (hot_dog.estado, hot_dog.admite_codigos) == ("activa", True)
    deposit = pos.deposit_codes(hot_dog.id, ["PY-0001", "PY-0002"])
    assert (deposit.promo_nombre, deposit.agregados) == ("2x1 Hot Dog", 2)
    by_name = pos.deposit_codes("2x1 hot dog", ["PY-0002"])
    assert by_name.duplicados == 1
    page = pos.roster(limite=2)
    assert len(page.fans) == 2
    assert page.hay_mas
    rest = pos.roster(desde=page.siguiente, limite=100)
    assert rest.desde == page.siguiente
    gone = [f for f in page.fans + rest.fans if f.estado == "baja"]
    assert gone
    assert gone[0].baja_en is not None


def test_rate_limit_retry_info_is_honoured(db_url, demo, sleeps):
    """Over the limit the server says when to come back (RetryInfo: the window's rest,
    tens of seconds): the client never retries sooner, so with 5 s left it gives up at
    once with demasiadas_llamadas."""
    limited = build_server(
        ServerSettings(
            database_url=db_url,
            admin_token=ADMIN_TOKEN,
            port=0,
            max_workers=2,
            rate_limit_per_minute=2,
            key_cache_seconds=0,
        )
    )
    limited.start()
    try:
        with PosClient.connect(
            f"127.0.0.1:{limited.port}",
            PING_ONLY,
            RetryPolicy(deadline=5.0),
            clock=Clock(sleep=sleeps),
        ) as client:
            client.ping()
            client.ping()
            with pytest.raises(LoyaltyCallError) as caught:
                client.ping()
    finally:
        limited.stop()
    error = caught.value
    assert (error.status, error.codigo) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "demasiadas_llamadas",
    )
    assert error.retry_after is not None
    assert error.retry_after > 5
    assert (error.attempts, sleeps.slept) == (1, [])


def test_a_call_retries_through_a_server_restart(db_url, demo):
    """The server stops under the client; the client's first retry finds it gone
    (UNAVAILABLE); the server starts again on the same port before the client's next
    attempt (started from the client's first back-off sleep: no race with the clock); the
    same request then succeeds, once."""
    port = free_port()

    def start() -> GrpcServer:
        server = build_server(
            ServerSettings(
                database_url=db_url,
                admin_token=ADMIN_TOKEN,
                port=port,
                max_workers=2,
                key_cache_seconds=0,
                grace_seconds=1,
            )
        )
        server.start()
        return server

    first = start()
    restarted: list[GrpcServer] = []
    sleeps = Sleeps(before_first=lambda: restarted.append(start()))
    try:
        with PosClient.connect(f"127.0.0.1:{port}", KEY, clock=Clock(sleep=sleeps)) as client:
            before = client.register_sale("py-restart-0", "DEMO0004", centavos=100)
            first.stop()
            sale = client.register_sale("py-restart-1", "DEMO0004", centavos=1000)
            again = client.register_sale("py-restart-1", "DEMO0004", centavos=1000)
    finally:
        first.stop()
        for server in restarted:
            server.stop()
    assert not before.duplicado
    assert len(restarted) == 1
    assert sleeps.slept  # it did retry
    assert (sale.duplicado, sale.puntos_otorgados) == (False, 1)
    assert (again.duplicado, again.tx) == (True, sale.tx)
    # A retry shows what the sale credited when it was applied.
    assert (again.puntos_otorgados, again.puntos_acreditados) == (0, sale.puntos_acreditados)
    assert sale.puntos_acreditados == sale.puntos_otorgados


def test_mutual_tls(db_url, demo, grpc_tls):
    """The client's channel with the `loyalty` commands' mutual TLS files (GrpcTls)."""
    secure = build_server(
        ServerSettings(
            database_url=db_url,
            admin_token=ADMIN_TOKEN,
            port=0,
            max_workers=2,
            key_cache_seconds=0,
            tls_cert=str(grpc_tls.cert),
            tls_key=str(grpc_tls.key),
            tls_ca=str(grpc_tls.ca),
        )
    )
    secure.start()
    try:
        with PosClient.connect(f"localhost:{secure.port}", KEY, tls=grpc_tls) as client:
            assert client.ping().programa == "Club Demo"
        with (
            PosClient.connect(f"localhost:{secure.port}", KEY, RetryPolicy(deadline=None)) as plain,
            pytest.raises(LoyaltyCallError) as caught,
        ):
            plain.ping()
    finally:
        secure.stop()
    assert caught.value.status == grpc.StatusCode.UNAVAILABLE
    assert caught.value.codigo is None
