"""The real stack, started once per test session: embedded PostgreSQL (migrated, with a
test fixture applied) + the gRPC server + Envoy in front of it."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.api.server import GrpcServer, ServerSettings, build_server
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.runtime.envoy import EnvoyProcess
from loyalty_grpc.services.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from tests.support import Admin, free_port

ALL = ["fan:leer", "tx:escribir", "redeem:escribir", "codigos:escribir", "roster:leer"]


def _key(modo: str) -> str:
    return f"lp_{modo}_" + secrets.token_hex(16)


@dataclass
class Stack:
    base_url: str
    grpc_target: str
    envoy_port: int
    admin: Admin
    # integration name -> key
    keys: dict[str, str]

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10)


@pytest.fixture(scope="session")
def stack(create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    url = create_database()
    upgrade(url)
    keys = {"todo": _key("vivo"), "prueba": _key("prueba"), "ping": _key("vivo"),
            "tx": _key("vivo")}
    fixture = {"programas": [{
        "id": "e2e", "nombre": "Club E2E", "tasa_puntos": "0.1",
        "qr_url": "https://e2e.example/fan",
        "claves": [
            {"clave": keys["todo"], "integracion": "Caja Todo", "permisos": ALL},
            {"clave": keys["prueba"], "integracion": "Caja Pruebas", "permisos": ALL},
            {"clave": keys["ping"], "integracion": "Kiosko Ping", "permisos": []},
            {"clave": keys["tx"], "integracion": "Terminal Ventas", "permisos": ["tx:escribir"]},
        ],
        "fans": [{"id": "E2E0001", "nombre": "Ana", "correo": "ana@example.com",
                  "socio_desde": 2018, "temporadas": 5, "qr_token": "q7Hk2Pz", "puntos": 100}],
    }]}
    engine = make_engine(url, pool_size=1)
    apply_fixture(engine, json.dumps(fixture))
    engine.dispose()

    admin_token = secrets.token_urlsafe(24)
    server: GrpcServer = build_server(ServerSettings(
        database_url=url, admin_token=admin_token, port=0, key_cache_seconds=0, max_workers=8))
    server.start()
    http_port = free_port()
    proxy = EnvoyProcess.start(http_port=http_port, upstream_host="127.0.0.1",
                               upstream_port=server.port,
                               work_dir=Path(tmp_path_factory.mktemp("envoy")))
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield Stack(base_url=proxy.url, grpc_target=f"127.0.0.1:{server.port}",
                    envoy_port=http_port,
                    admin=Admin(bo_grpc.BackofficeServiceStub(channel), admin_token), keys=keys)
    finally:
        channel.close()
        proxy.stop()
        server.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.http() as client:
        yield client
