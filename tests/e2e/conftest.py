"""The real stack, started once per test session: embedded PostgreSQL (migrated, with a
test fixture applied) + the gRPC server + Envoy in front of it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.api.server import GrpcServer, ServerSettings, build_server
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from loyalty_grpc.wallet import LocalProvider, WalletSender
from tests.e2e.stack import ALL, Stack, new_key
from tests.support import Admin, free_port


@pytest.fixture(scope="session")
def stack(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    url = create_database()
    upgrade(url)
    keys = {
        "todo": new_key("vivo"),
        "prueba": new_key("prueba"),
        "ping": new_key("vivo"),
        "tx": new_key("vivo"),
    }
    fixture = {
        "programas": [
            {
                "id": "e2e",
                "nombre": "Club E2E",
                "tasa_puntos": "0.1",
                "qr_url": "https://e2e.example/fan",
                "claves": [
                    {"clave": keys["todo"], "integracion": "Caja Todo", "permisos": ALL},
                    {"clave": keys["prueba"], "integracion": "Caja Pruebas", "permisos": ALL},
                    {"clave": keys["ping"], "integracion": "Kiosko Ping", "permisos": []},
                    {
                        "clave": keys["tx"],
                        "integracion": "Terminal Ventas",
                        "permisos": ["tx:escribir"],
                    },
                ],
                "fans": [
                    {
                        "id": "E2E0001",
                        "nombre": "Ana",
                        "correo": "ana@example.com",
                        "socio_desde": 2018,
                        "temporadas": 5,
                        "qr_token": "q7Hk2Pz",
                        "puntos": 100,
                    }
                ],
            }
        ]
    }
    engine = make_engine(url, pool_size=4)
    run_in_uow(engine, apply_fixture, json.dumps(fixture))

    admin_token = secrets.token_urlsafe(24)
    # The call limiter runs on every call, with a limit the suite never reaches
    # (tests/e2e/test_rate_limit_http.py has its own small-limit stack); so does the limit
    # on failed key checks (every module's unknown keys come from 127.0.0.1;
    # tests/e2e/test_client_address.py has its own small-limit stack).
    server: GrpcServer = build_server(
        ServerSettings(
            database_url=url,
            admin_token=admin_token,
            port=0,
            key_cache_seconds=0,
            max_workers=8,
            rate_limit_per_minute=1_000_000,
            failed_key_checks_per_minute=1_000_000,
        )
    )
    server.start()
    # The wallet-pass sender runs beside the server, as in `loyalty up`.
    sender = WalletSender(engine, LocalProvider(engine), interval=0.2)
    sender.start()
    http_port = free_port()
    proxy = EnvoyProcess.start_spec(
        gateway_spec(http_port=http_port, upstreams=(f"127.0.0.1:{server.port}",)),
        work_dir=Path(tmp_path_factory.mktemp("envoy")),
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield Stack(
            base_url=proxy.url,
            grpc_target=f"127.0.0.1:{server.port}",
            envoy_port=http_port,
            admin=Admin(bo_grpc.BackofficeServiceStub(channel), admin_token),
            keys=keys,
            engine=engine,
            gateway=proxy,
        )
    finally:
        channel.close()
        proxy.stop()
        sender.stop()
        server.stop()
        engine.dispose()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.http() as client:
        yield client


@pytest.fixture
def migrated_database(create_database: Callable[[], str]) -> str:
    """A database of its own, migrated: for tests that start `serve` processes."""
    url = create_database()
    upgrade(url)
    return url
