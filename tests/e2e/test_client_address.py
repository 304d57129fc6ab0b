"""The client address through the real Envoy (runtime/gateway/checks.py, api/gateway_protocol.py)
and the limit on failed key checks behind it (api/failed_checks.py).

What the server receives as `x-loyalty-client-address`, recorded by a tiny gRPC server
behind Envoys rendered as `loyalty up` renders them: by default the TCP peer (127.0.0.1
here) whatever the client sends (its own value of the header, any X-Forwarded-For), over
HTTP/1.1 and h2c; with LOYALTY_TRUSTED_PROXIES covering the peer, the last address of the
X-Forwarded-For, and still a fresh request id; with trusted proxies that do not cover the
peer, the peer again.

Then the real server (a small limit, its own database) behind two Envoys, one with
127.0.0.1 as a trusted proxy so that X-Forwarded-For plays the client addresses: a flood
of unknown keys from one address gets `LIMIT` 401s then 429 with Retry-After, and the
server's address verdict never reaches the HTTP client; another address is not affected;
a key that worked keeps working; behind the default Envoy a spoofed X-Forwarded-For
changes nothing (every call is 127.0.0.1's)."""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.api.gateway_protocol import ADDRESS_BLOCKED_KEY, CLIENT_ADDRESS_KEY
from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2, pos_service_pb2_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from tests.e2e.support import assert_error, auth, h2c
from tests.support import free_port

LIMIT = 5
KEY = "lp_prueba_" + "x" * 24


# ---------------------------------------------------------------- what the server receives


class Recording(pos_service_pb2_grpc.PosServiceServicer):
    """Ping (POST and GET) answers and keeps the metadata each call carried."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[dict[str, list[str]]] = []

    def _record(self, context: grpc.ServicerContext) -> None:
        seen: dict[str, list[str]] = {}
        for key, value in context.invocation_metadata():
            seen.setdefault(key, []).append(value if isinstance(value, str) else value.decode())
        with self.lock:
            self.calls.append(seen)

    def Ping(self, request, context):  # noqa: N802
        self._record(context)
        return pos_service_pb2.PingResponse(
            ok=True,
            data=pos_service_pb2.PingData(
                integracion="Caja", programa="Club", modo="prueba", hora="2026-01-01T00:00:00Z"
            ),
        )

    def PingGet(self, request, context):  # noqa: N802 (h2c() sends a GET)
        self._record(context)
        return pos_service_pb2.PingGetResponse(
            ok=True,
            data=pos_service_pb2.PingGetData(
                programa="Club", modo="prueba", hora="2026-01-01T00:00:00Z"
            ),
        )

    def last(self) -> dict[str, list[str]]:
        with self.lock:
            return self.calls[-1]


@dataclass
class Recorded:
    recording: Recording
    start_envoy: Callable[[tuple[str, ...]], EnvoyProcess]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    recording = Recording()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pos_service_pb2_grpc.add_PosServiceServicer_to_server(recording, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    started: list[EnvoyProcess] = []

    def start_envoy(trusted_proxies: tuple[str, ...]) -> EnvoyProcess:
        proxy = EnvoyProcess.start_spec(
            gateway_spec(
                http_port=free_port(),
                upstreams=(f"127.0.0.1:{port}",),
                listen_host="127.0.0.1",
                trusted_proxies=trusted_proxies,
            ),
            work_dir=tmp_path_factory.mktemp("envoy-address"),
        )
        started.append(proxy)
        return proxy

    try:
        yield Recorded(recording, start_envoy)
    finally:
        for proxy in started:
            proxy.stop()
        server.stop(grace=None)


@pytest.fixture(scope="module")
def by_peer(recorded: Recorded) -> EnvoyProcess:
    return recorded.start_envoy(())


@pytest.fixture(scope="module")
def behind_proxy(recorded: Recorded) -> EnvoyProcess:
    return recorded.start_envoy(("127.0.0.1/32",))


@pytest.fixture(scope="module")
def proxy_elsewhere(recorded: Recorded) -> EnvoyProcess:
    return recorded.start_envoy(("10.0.0.0/8", "2001:db8::/32"))


def _ping(
    proxy: EnvoyProcess, recording: Recording, headers: list[tuple[str, str]]
) -> dict[str, list[str]]:
    with httpx.Client(base_url=proxy.url, timeout=10) as client:
        response = client.post("/api/v1/ping", headers=[*auth(KEY).items(), *headers])
    assert response.status_code == 200, response.text
    return recording.last()


SPOOFS: dict[str, list[tuple[str, str]]] = {
    "nothing": [],
    "its own address header": [(CLIENT_ADDRESS_KEY, "203.0.113.66")],
    "two address headers": [(CLIENT_ADDRESS_KEY, "203.0.113.66"), (CLIENT_ADDRESS_KEY, "x")],
    "x-forwarded-for": [("x-forwarded-for", "203.0.113.66")],
    "a forwarded chain": [("x-forwarded-for", "198.51.100.1, 203.0.113.66")],
    "x-real-ip and forwarded": [
        ("x-real-ip", "203.0.113.66"),
        ("forwarded", "for=203.0.113.66"),
    ],
}


@pytest.mark.parametrize("sent", list(SPOOFS.values()), ids=list(SPOOFS))
def test_by_default_the_address_is_the_tcp_peer_whatever_the_client_sends(
    recorded: Recorded, by_peer: EnvoyProcess, sent: list[tuple[str, str]]
) -> None:
    seen = _ping(by_peer, recorded.recording, sent)
    assert seen[CLIENT_ADDRESS_KEY] == ["127.0.0.1"]


@pytest.mark.parametrize("sent", list(SPOOFS.values()), ids=list(SPOOFS))
def test_over_h2c_too(
    recorded: Recorded, by_peer: EnvoyProcess, sent: list[tuple[str, str]]
) -> None:
    answer = h2c(by_peer.http_port, KEY, [(n.encode(), v.encode()) for n, v in sent])
    assert answer["ok"] is True
    assert recorded.recording.last()[CLIENT_ADDRESS_KEY] == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("forwarded", "address"),
    [
        (None, "127.0.0.1"),  # no X-Forwarded-For: the proxy itself
        ("203.0.113.7", "203.0.113.7"),
        ("198.51.100.1, 203.0.113.7", "203.0.113.7"),  # the entry the proxy appended
        ("2001:db8::7", "2001:db8::7"),
        ("not-an-address", "127.0.0.1"),
    ],
)
def test_behind_a_trusted_proxy_the_address_is_the_last_forwarded_one(
    recorded: Recorded, behind_proxy: EnvoyProcess, forwarded: str | None, address: str
) -> None:
    sent = [(CLIENT_ADDRESS_KEY, "192.0.2.99")]
    if forwarded is not None:
        sent.append(("x-forwarded-for", forwarded))
    seen = _ping(behind_proxy, recorded.recording, sent)
    assert seen[CLIENT_ADDRESS_KEY] == [address]


def test_behind_a_trusted_proxy_the_request_id_is_still_envoys(
    recorded: Recorded, behind_proxy: EnvoyProcess
) -> None:
    """Trusting proxies turns off use_remote_address, which would let a client's own
    x-request-id through; the rendering removes it first. A private forwarded address
    does not make the request internal either (no x-envoy-internal, no x-envoy-* of the
    client's)."""
    seen = _ping(
        behind_proxy,
        recorded.recording,
        [
            ("x-request-id", "chosen-by-the-client"),
            ("x-forwarded-for", "10.1.2.3"),
            ("x-envoy-retry-on", "5xx"),
        ],
    )
    assert seen[CLIENT_ADDRESS_KEY] == ["10.1.2.3"]
    (request_id,) = seen["x-request-id"]
    assert uuid.UUID(request_id).version == 4
    assert "x-envoy-internal" not in seen
    assert "x-envoy-retry-on" not in seen


def test_a_forwarded_address_from_an_untrusted_peer_changes_nothing(
    recorded: Recorded, proxy_elsewhere: EnvoyProcess
) -> None:
    for forwarded in ("203.0.113.7", "10.1.2.3", "198.51.100.1, 10.9.9.9"):
        seen = _ping(proxy_elsewhere, recorded.recording, [("x-forwarded-for", forwarded)])
        assert seen[CLIENT_ADDRESS_KEY] == ["127.0.0.1"]


# ---------------------------------------------------------------- the real server


@dataclass
class Limited:
    by_peer: str  # base URL of the default Envoy
    behind_proxy: str  # base URL of the Envoy that trusts 127.0.0.1's X-Forwarded-For
    key: str  # a key of the module's program


@pytest.fixture(scope="module")
def limited(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Limited]:
    url = create_database()
    upgrade(url)
    engine = make_engine(url, pool_size=2)
    key = "lp_vivo_" + secrets.token_hex(16)
    fixture = {
        "programas": [
            {
                "id": "direcciones",
                "nombre": "Club Direcciones",
                "tasa_puntos": "0.1",
                "qr_url": "https://direcciones.example/fan",
                "claves": [{"clave": key, "integracion": "Caja", "permisos": []}],
                "fans": [],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(fixture))
    server = build_server(
        ServerSettings(
            database_url=url,
            admin_token=secrets.token_urlsafe(24),
            port=0,
            max_workers=4,
            failed_key_checks_per_minute=LIMIT,
        )
    )
    server.start()
    proxies: list[EnvoyProcess] = []
    try:
        for trusted in ((), ("127.0.0.1/32",)):
            proxies.append(
                EnvoyProcess.start_spec(
                    gateway_spec(
                        http_port=free_port(),
                        upstreams=(f"127.0.0.1:{server.port}",),
                        listen_host="127.0.0.1",
                        trusted_proxies=trusted,
                    ),
                    work_dir=Path(tmp_path_factory.mktemp("envoy-limited")),
                )
            )
        yield Limited(proxies[0].url, proxies[1].url, key)
    finally:
        for proxy in proxies:
            proxy.stop()
        server.stop()
        engine.dispose()


def _unknown_key() -> str:
    return "lp_vivo_" + secrets.token_hex(16)


def _flood(client: httpx.Client, forwarded: str, calls: int) -> list[httpx.Response]:
    return [
        client.post("/api/v1/ping", headers={**auth(_unknown_key()), "x-forwarded-for": forwarded})
        for _ in range(calls)
    ]


def test_a_flood_from_one_address_is_refused_and_the_verdict_stays_inside(
    limited: Limited,
) -> None:
    with httpx.Client(base_url=limited.behind_proxy, timeout=10) as client:
        assert (
            client.post(
                "/api/v1/ping", headers={**auth(limited.key), "x-forwarded-for": "203.0.113.1"}
            ).status_code
            == 200
        )
        responses = _flood(client, "203.0.113.1", 3 * LIMIT)
        for response in responses[:LIMIT]:
            assert_error(response, CodigoError.CLAVE_INVALIDA)
        for response in responses[LIMIT:]:
            error = assert_error(response, CodigoError.DEMASIADAS_LLAMADAS)
            retry_after = int(response.headers["retry-after"])
            assert 1 <= retry_after <= 60
            assert f"reintente en {retry_after} s" in error["detalle"]
            assert "203.0.113.1" not in response.text
        for response in responses:
            assert ADDRESS_BLOCKED_KEY not in response.headers
            assert not [name for name in response.headers if name.startswith("x-loyalty")]
        # The key that worked from there still does; another address is not affected.
        worked = client.post(
            "/api/v1/ping", headers={**auth(limited.key), "x-forwarded-for": "203.0.113.1"}
        )
        assert worked.status_code == 200, worked.text
        assert_error(_flood(client, "198.51.100.1", 1)[0], CodigoError.CLAVE_INVALIDA)


def test_behind_the_default_gateway_a_spoofed_forwarded_address_changes_nothing(
    limited: Limited,
) -> None:
    """Every call is 127.0.0.1's, whatever X-Forwarded-For says: a flood that names a
    new address each time is still refused after `LIMIT`."""
    with httpx.Client(base_url=limited.by_peer, timeout=10) as client:
        assert client.post("/api/v1/ping", headers=auth(limited.key)).status_code == 200
        responses = [
            client.post(
                "/api/v1/ping",
                headers={**auth(_unknown_key()), "x-forwarded-for": f"203.0.113.{n}"},
            )
            for n in range(2 * LIMIT)
        ]
        codigos = [response.json()["error"]["codigo"] for response in responses]
        assert (
            codigos
            == [CodigoError.CLAVE_INVALIDA.value] * LIMIT
            + [CodigoError.DEMASIADAS_LLAMADAS.value] * LIMIT
        )
        assert client.post("/api/v1/ping", headers=auth(limited.key)).status_code == 200
