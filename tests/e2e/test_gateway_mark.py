"""The gateway mark (api/gateway_protocol.py) on the running Envoy: every request Envoy
forwards reaches the server with exactly one `x-loyalty-gateway: 1`, whatever the client
sent under that name (nothing, another value, several copies, over HTTP/1.1 or h2c), and
through Envoy a client cannot change the envelope of a server error by sending the mark,
`x-envelope` or `x-http-status` itself.

Envoy runs here as `loyalty up` runs it (EnvoyProcess: the rendering of gateway/envoy.yaml
split for file-based xDS), first in front of a tiny recording gRPC server, then in front of
the real server (the session's stack). Native gRPC callers without the mark:
tests/integration/test_error_metadata.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import httpx
import pytest

from loyalty_grpc.api.gateway_protocol import (
    ENVELOPE_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
    HTTP_STATUS_KEY,
)
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2, pos_service_pb2_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from tests.e2e.stack import Stack
from tests.e2e.support import h2c
from tests.support import free_port

PROGRAM = "marca"
FANS: list[dict[str, object]] = [
    {
        "id": "MAR0001",
        "nombre": "Ana",
        "correo": "ana@marca.example",
        "socio_desde": 2020,
        "qr_token": "MarQr01",
    }
]
MARK = GATEWAY_MARK_KEY.encode()

# What a client may send under the mark's name (as raw header lines).
CLIENT_MARKS: dict[str, list[tuple[bytes, bytes]]] = {
    "none": [],
    "another value": [(MARK, b"0")],
    "empty": [(MARK, b"")],
    "the value itself": [(MARK, GATEWAY_MARK_VALUE.encode())],
    "two copies": [(MARK, b"0"), (MARK, b"forjado")],
    "upper-case name": [(GATEWAY_MARK_KEY.upper().encode(), b"forjado")],
}


# ---------------------------------------------------------------- what the server receives


class Recording(pos_service_pb2_grpc.PosServiceServicer):
    """Ping (POST and GET) answers and keeps the values of the mark each call carried."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marks: list[list[str]] = []

    def _record(self, context: grpc.ServicerContext) -> None:
        values = [
            value if isinstance(value, str) else value.decode()
            for key, value in context.invocation_metadata()
            if key == GATEWAY_MARK_KEY
        ]
        with self.lock:
            self.marks.append(values)

    def Ping(self, request, context):  # noqa: N802
        self._record(context)
        return pos_service_pb2.PingResponse(
            ok=True,
            data=pos_service_pb2.PingData(
                integracion="Caja", programa="Club", modo="prueba", hora="2026-01-01T00:00:00Z"
            ),
        )

    def PingGet(self, request, context):  # noqa: N802
        self._record(context)
        return pos_service_pb2.PingGetResponse(
            ok=True,
            data=pos_service_pb2.PingGetData(
                programa="Club", modo="prueba", hora="2026-01-01T00:00:00Z"
            ),
        )

    def last(self) -> list[str]:
        with self.lock:
            return self.marks[-1]


@pytest.fixture(scope="module")
def recording() -> Recording:
    # The methods left out answer UNIMPLEMENTED (grpcio's default); only Ping is called.
    return Recording()  # type: ignore[abstract]


@pytest.fixture(scope="module")
def recorded_gateway(
    recording: Recording, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnvoyProcess]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pos_service_pb2_grpc.add_PosServiceServicer_to_server(recording, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(), upstreams=(f"127.0.0.1:{port}",), listen_host="127.0.0.1"
        ),
        work_dir=tmp_path_factory.mktemp("envoy-mark"),
    )
    try:
        yield proxy
    finally:
        proxy.stop()
        server.stop(grace=None)


@pytest.mark.parametrize("sent", list(CLIENT_MARKS.values()), ids=list(CLIENT_MARKS))
def test_every_forwarded_http1_request_carries_exactly_the_mark(
    recorded_gateway: EnvoyProcess, recording: Recording, sent: list[tuple[bytes, bytes]]
) -> None:
    with httpx.Client(base_url=recorded_gateway.url, timeout=10) as client:
        response = client.post(
            "/api/v1/ping", headers=[(b"authorization", b"Bearer lp_prueba_" + b"x" * 24), *sent]
        )
    assert response.status_code == 200, response.text
    assert recording.last() == [GATEWAY_MARK_VALUE]


@pytest.mark.parametrize("sent", list(CLIENT_MARKS.values()), ids=list(CLIENT_MARKS))
def test_every_forwarded_h2c_request_carries_exactly_the_mark(
    recorded_gateway: EnvoyProcess, recording: Recording, sent: list[tuple[bytes, bytes]]
) -> None:
    answer = h2c(
        recorded_gateway.http_port, "lp_prueba_" + "x" * 24, [(n.lower(), v) for n, v in sent]
    )
    assert answer["ok"] is True
    assert recording.last() == [GATEWAY_MARK_VALUE]


# ---------------------------------------------------------------- the real server


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program(PROGRAM, fans=FANS)["todo"]


# Request headers a client may add to try to change an error's envelope.
FORGERIES: dict[str, list[tuple[str, str]]] = {
    "mark with another value": [(GATEWAY_MARK_KEY, "0")],
    "mark twice": [(GATEWAY_MARK_KEY, "0"), (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE)],
    "own envelope": [
        (ENVELOPE_KEY, '{"ok":true,"data":{}}'),
        (HTTP_STATUS_KEY, "200"),
    ],
    "all of it": [
        (GATEWAY_MARK_KEY, "no"),
        (ENVELOPE_KEY, '{"ok":false,"error":{"codigo":"x","mensaje":"x","detalle":"x"}}'),
        (HTTP_STATUS_KEY, "418"),
    ],
}


def _resolve_unknown(http: httpx.Client, key: str, extra: list[tuple[str, str]]) -> httpx.Response:
    return http.post(
        "/api/v1/fan/resolve",
        json={"fan": "MAR9999"},
        headers=[("authorization", f"Bearer {key}"), *extra],
    )


def _assert_server_envelope(response: httpx.Response, codigo: CodigoError) -> None:
    """The envelope the server wrote (its detalle reached the client: the server sent
    x-envelope, so it saw the mark), with no internal header."""
    assert response.status_code == CATALOGO[codigo].http, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["codigo"] == codigo.value
    assert error["detalle"]  # only the server's x-envelope carries one for these codes
    for name in response.headers:
        assert name.lower() not in (ENVELOPE_KEY, HTTP_STATUS_KEY, GATEWAY_MARK_KEY), name


# A well-formed key the server does not know: its clave_invalida is the server's envelope
# (a call without a key is refused by the gateway itself, from its headers).
UNKNOWN_KEY = {"authorization": "Bearer lp_vivo_" + "Z" * 30}


def test_server_errors_through_envoy_are_the_servers_envelope(http: httpx.Client, key: str) -> None:
    _assert_server_envelope(_resolve_unknown(http, key, []), CodigoError.FAN_NO_ENCONTRADO)
    _assert_server_envelope(
        http.post("/api/v1/ping", json={}, headers=UNKNOWN_KEY), CodigoError.CLAVE_INVALIDA
    )


@pytest.mark.parametrize("forged", list(FORGERIES.values()), ids=list(FORGERIES))
def test_a_client_cannot_change_the_envelope(
    http: httpx.Client, key: str, forged: list[tuple[str, str]]
) -> None:
    expected = _resolve_unknown(http, key, [])
    response = _resolve_unknown(http, key, forged)
    _assert_server_envelope(response, CodigoError.FAN_NO_ENCONTRADO)
    assert response.content == expected.content
    unauthenticated = http.post("/api/v1/ping", json={}, headers=UNKNOWN_KEY)
    forged_unauthenticated = http.post(
        "/api/v1/ping", json={}, headers=[*UNKNOWN_KEY.items(), *forged]
    )
    _assert_server_envelope(forged_unauthenticated, CodigoError.CLAVE_INVALIDA)
    assert forged_unauthenticated.content == unauthenticated.content
