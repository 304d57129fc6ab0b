"""The per-key call limit over HTTP through the real Envoy: the IETF RateLimit fields on
successes and on ordinary errors, and the 429 envelope with Retry-After. A server and
Envoy of this module's own, with a small limit (the session stack's limit is high)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.domain.rate_limit import SLOTS
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from tests.e2e.support import assert_error, auth
from tests.support import free_port

LIMIT = 5
POLICY = f'"default";q={LIMIT};w=60'
RATELIMIT = re.compile(r'^"default";r=(\d+);t=(\d+)$')


@dataclass
class LimitedStack:
    base_url: str
    new_key: Callable[[], str]


@pytest.fixture(scope="module")
def limited(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LimitedStack]:
    url = create_database()
    upgrade(url)
    engine = make_engine(url, pool_size=2)
    counter = iter(range(1000))

    def new_key() -> str:
        """A fresh key (its own counter) of the module's program, with fan:leer."""
        key = "lp_vivo_" + secrets.token_hex(16)
        run_in_uow(
            engine,
            apply_fixture,
            json.dumps(
                {
                    "programas": [
                        {
                            "id": "limite",
                            "nombre": "Club Limite",
                            "tasa_puntos": "0.1",
                            "qr_url": "https://limite.example/fan",
                            "claves": [
                                {
                                    "clave": key,
                                    "integracion": f"Caja {next(counter)}",
                                    "permisos": ["fan:leer"],
                                }
                            ],
                            "fans": [],
                        }
                    ]
                }
            ),
        )
        return key

    server = build_server(
        ServerSettings(
            database_url=url,
            admin_token=secrets.token_urlsafe(24),
            port=0,
            key_cache_seconds=0,
            max_workers=4,
            rate_limit_per_minute=LIMIT,
        )
    )
    server.start()
    proxy = None
    try:
        proxy = EnvoyProcess.start_spec(
            gateway_spec(http_port=free_port(), upstreams=(f"127.0.0.1:{server.port}",)),
            work_dir=Path(tmp_path_factory.mktemp("envoy-limit")),
        )
        yield LimitedStack(proxy.url, new_key)
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
        engine.dispose()


@pytest.fixture
def http(limited: LimitedStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=limited.base_url, timeout=10) as client:
        yield client


def ratelimit(response: httpx.Response) -> tuple[int, int]:
    assert response.headers["ratelimit-policy"] == POLICY
    match = RATELIMIT.match(response.headers["ratelimit"])
    assert match, response.headers["ratelimit"]
    return int(match[1]), int(match[2])


def test_success_carries_the_ratelimit_fields(limited: LimitedStack, http: httpx.Client):
    key = limited.new_key()
    for i in range(3):
        response = http.post("/api/v1/ping", headers=auth(key))
        assert response.status_code == 200
        assert response.json()["ok"] is True
        remaining, reset = ratelimit(response)
        assert remaining == LIMIT - i - 1
        assert 1 <= reset <= SLOTS
        assert "retry-after" not in response.headers


def test_an_ordinary_error_carries_the_ratelimit_fields(limited: LimitedStack, http: httpx.Client):
    key = limited.new_key()
    response = http.post("/api/v1/fan/resolve", headers=auth(key), json={"fan": "NADIE999"})
    assert_error(response, CodigoError.FAN_NO_ENCONTRADO)
    assert ratelimit(response)[0] == LIMIT - 1
    # A validation error counts too.
    response = http.post("/api/v1/fan/resolve", headers=auth(key), json={})
    assert response.status_code == 400
    assert ratelimit(response)[0] == LIMIT - 2


def test_over_the_limit_is_429_with_retry_after(limited: LimitedStack, http: httpx.Client):
    key = limited.new_key()
    for _ in range(LIMIT):
        assert http.get("/api/v1/ping", headers=auth(key)).status_code == 200
    for _ in range(2):
        response = http.get("/api/v1/ping", headers=auth(key))
        error = assert_error(response, CodigoError.DEMASIADAS_LLAMADAS)
        retry_after = int(response.headers["retry-after"])
        assert 1 <= retry_after <= SLOTS
        assert ratelimit(response) == (0, retry_after)
        assert str(retry_after) in error["detalle"]


def test_unknown_key_gets_no_ratelimit_fields(http: httpx.Client):
    response = http.post("/api/v1/ping", headers=auth("lp_vivo_" + "x" * 32))
    assert_error(response, CodigoError.CLAVE_INVALIDA)
    assert "ratelimit" not in response.headers
