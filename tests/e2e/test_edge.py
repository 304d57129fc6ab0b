"""The gateway's edge (gateway/envelope.lua's envoy_on_request, the binding routes of
gateway/envoy.yaml and the parse limits of request_check.lua) through the real Envoy in
front of a recording in-test gRPC server, over HTTP/1.1 and h2c: a call is judged on its
headers before its body is read, a body is read only as far as its operation can need,
and the server's address verdict is remembered. Every refusal is the envelope, its
codigo and detalle those of the single sources (domain/keys.py, api/edge_limits.py,
domain/codes.py), and nothing refused reaches the server.

The attacks are bounded (a few requests each, on loopback); a refused request's body is
never sent at all, so an answer proves the gateway did not wait for it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.api import edge_limits
from loyalty_grpc.api.edge_limits import BINDINGS, FLOOR, MAX_DEPTH, MAX_MEMBERS
from loyalty_grpc.api.gateway_protocol import (
    ADDRESS_BLOCKED_KEY,
)
from loyalty_grpc.domain import keys
from loyalty_grpc.domain.codes import MAX_CODES_PER_CALL, too_many_codes
from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CATALOGO, CodigoError, LoyaltyError
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess
from tests.e2e.fake_server import grpc_server, server_error, start_gateway
from tests.e2e.h2_client import H2Connection
from tests.e2e.support import TIMEOUT, h2c_stream

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
KEY = "lp_prueba_" + "K" * 32
AUTH = {"authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
SECONDS_BLOCKED = 30
# Tokens the verdict server answers specially (well-formed keys all).
BLOCKING = "lp_vivo_BLOCK" + "0" * 24
BLOCKING_BRIEFLY = "lp_vivo_BRIEF" + "0" * 24
REVOKED = "lp_vivo_REVOKED" + "0" * 24


def random_key() -> str:
    return "lp_vivo_" + secrets.token_hex(16)


# ---------------------------------------------------------------- the recording server


BLOCKED_DETALLE = "demasiadas claves no válidas desde esta dirección; espere"


class Recorder(pb_grpc.PosServiceServicer):
    """Answers every POS method with an empty success, except for the tokens above, and
    keeps the token of each call it received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens: list[str] = []
        self.revoked: set[str] = {REVOKED}

    def count(self) -> int:
        with self.lock:
            return len(self.tokens)

    def _answer(self, context: grpc.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata())
        token = str(metadata.get("authorization", "")).removeprefix("Bearer ")
        with self.lock:
            self.tokens.append(token)
            revoked = token in self.revoked
        if token in (BLOCKING, BLOCKING_BRIEFLY):
            seconds = SECONDS_BLOCKED if token == BLOCKING else 1
            context.abort_with_status(
                server_error(
                    CodigoError.DEMASIADAS_LLAMADAS,
                    BLOCKED_DETALLE,
                    (("retry-after", str(seconds)), (ADDRESS_BLOCKED_KEY, str(seconds))),
                )
            )
        if revoked:
            context.abort_with_status(
                server_error(CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)
            )

    def Ping(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.PingResponse(ok=True)

    def PingGet(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.PingGetResponse(ok=True)

    def ResolveFan(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.ResolveFanResponse(ok=True)

    def RegisterTx(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.RegisterTxResponse(ok=True)

    def Redeem(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.RedeemResponse(ok=True)

    def ListPromos(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.ListPromosResponse(ok=True)

    def DepositCodes(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.DepositCodesResponse(ok=True)

    def Roster(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.RosterResponse(ok=True)

    def RosterPost(self, request, context):  # noqa: N802
        self._answer(context)
        return pb.RosterPostResponse(ok=True)


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def grpc_port(recorder: Recorder) -> Iterator[int]:
    with grpc_server(
        lambda server: pb_grpc.add_PosServiceServicer_to_server(recorder, server)
    ) as port:
        yield port


@pytest.fixture(scope="module")
def gateway(grpc_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    proxy = start_gateway(grpc_port, tmp_path_factory.mktemp("envoy-edge"))
    yield proxy
    proxy.stop()


@pytest.fixture
def client(gateway: EnvoyProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=TIMEOUT) as http:
        yield http


# ---------------------------------------------------------------- helpers


def assert_refusal(answer: dict[str, object], codigo: CodigoError, detalle: str) -> None:
    assert answer == {
        "ok": False,
        "error": {"codigo": codigo.value, "mensaje": CATALOGO[codigo].mensaje, "detalle": detalle},
    }


def assert_response(
    response: httpx.Response, codigo: CodigoError, detalle: str | None = None
) -> str:
    assert response.status_code == CATALOGO[codigo].http, response.text
    assert response.headers["content-type"] == "application/json"
    for name in response.headers:
        assert not name.lower().startswith(("grpc-", "x-envelope", "x-http", "x-loyalty")), name
    body = response.json()
    assert body["error"]["codigo"] == codigo.value
    assert body["error"]["mensaje"] == CATALOGO[codigo].mensaje
    if detalle is not None:
        assert body["error"]["detalle"] == detalle
    return str(body["error"]["detalle"])


@dataclass
class Raw:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def json(self) -> dict[str, object]:
        decoded: dict[str, object] = json.loads(self.body)
        return decoded


def http1(port: int, head: bytes, body: bytes = b"", *, source: str = "127.0.0.1") -> Raw:
    """Send an HTTP/1.1 request head (and `body`, which may be only part of what the head
    announces) and read the one answer (envelope.lua sets its Content-Length)."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0)
    ) as sock:
        sock.sendall(head + body)
        data = b""
        while True:
            if b"\r\n\r\n" in data:
                top, _, rest = data.partition(b"\r\n\r\n")
                lines = top.split(b"\r\n")
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower()] = value.strip()
                if len(rest) >= int(headers.get(b"content-length", b"0")):
                    # Nothing internal leaves the gateway (the edge's mark, the verdict).
                    assert not [n for n in headers if n.startswith((b"x-loyalty", b"grpc-"))]
                    return Raw(int(lines[0].split(b" ")[1]), headers, rest)
            chunk = sock.recv(65536)
            assert chunk, f"Envoy closed the connection after {data!r}"
            data += chunk


def head(method: str, path: str, headers: dict[str, str], *, length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: pos.example"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(data: bytes, size: int = 1000) -> bytes:
    return b"".join(
        f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        for piece in (data[i : i + size] for i in range(0, len(data), size))
    )


def h2_fields(method: str, path: str, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", method.encode()),
        (b":scheme", b"http"),
        (b":authority", b"pos.example"),
        (b":path", path.encode()),
        *((name.encode(), value.encode()) for name, value in headers.items()),
    ]


# ---------------------------------------------------------------- the credential


def python_verdict(header: str | None) -> tuple[CodigoError, str] | None:
    """What the server says of this Authorization header (domain/keys.py): the source the
    gateway's copy must agree with."""
    try:
        token = keys.bearer_token(header)
    except LoyaltyError as error:
        return error.codigo, error.detalle
    if keys.mode_of(token) is None:
        return CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA
    return None


SECRET = "A" * keys.MIN_SECRET_LENGTH
AUTHORIZATIONS: list[str | None] = [
    None,
    "",
    "Basic dXNlcjpwYXNz",
    "Bearer",
    "Bearer ",
    "Bearer lp_vivo_" + SECRET,
    "bearer lp_vivo_" + SECRET,
    "BEARER    lp_prueba_" + SECRET,
    "BEARER lp_prueba_" + SECRET + "  ",
    "  Bearer lp_vivo_" + SECRET,
    "Bearerlp_vivo_" + SECRET,
    "Token lp_vivo_" + SECRET,
    "Bearer lp_vivo_" + SECRET[1:],
    "Bearer lp_vivo_" + SECRET + "é",
    "Bearer lp_vivo_" + SECRET + "-x",
    "Bearer lp_vivo_" + SECRET + " extra",
    "Bearer lp_otro_" + SECRET,
    "Bearer LP_VIVO_" + SECRET,
    "Bearer lp_vivo_" + "a" * 500,
    "Bearer lp_vivo_" + SECRET + ",Bearer lp_vivo_" + SECRET,
    "Bearer \t lp_vivo_" + SECRET,
]


@pytest.mark.parametrize("authorization", AUTHORIZATIONS)
def test_the_credential_is_judged_as_the_server_judges_it(
    gateway: EnvoyProcess, recorder: Recorder, authorization: str | None
) -> None:
    """Over HTTP/1.1 and h2c: the gateway refuses exactly what domain/keys.py refuses, with
    its codigo and detalle, before the server; the rest reaches the server."""
    headers = {} if authorization is None else {"Authorization": authorization}
    expected = python_verdict(authorization)
    if (authorization is not None and not authorization.isascii()) or "\t" in (authorization or ""):
        # Values outside printable ASCII are dropped before (gRPC could not carry them):
        # the server would see no header at all.
        expected = python_verdict(None)
    # HTTP/2 forbids whitespace around a value (the codec refuses the stream).
    padded = authorization is not None and authorization != authorization.strip(" \t")
    for protocol in ("HTTP/1.1",) if padded else ("HTTP/1.1", "h2c"):
        before = recorder.count()
        if protocol == "HTTP/1.1":
            raw = http1(
                gateway.http_port,
                head("POST", "/api/v1/ping", {**headers, **JSON}, length=2) + b"{}",
            )
            answer = raw.json()
            status = raw.status
        else:
            answer = h2c_stream(
                gateway.http_port,
                h2_fields("GET", "/api/v1/ping", {k.lower(): v for k, v in headers.items()}),
                [],
            )
            status = None
        if expected is None:
            assert answer.get("ok") is True, (protocol, answer)
            assert recorder.count() == before + 1
        else:
            codigo, detalle = expected
            assert_refusal(answer, codigo, detalle)
            assert status in (None, CATALOGO[codigo].http)
            assert recorder.count() == before, protocol


def test_two_authorization_headers_are_one_value(gateway: EnvoyProcess, recorder: Recorder) -> None:
    """Envoy joins them ("a,b"), for the gateway and the server alike: not `Bearer <clave>`."""
    before = recorder.count()
    key = f"Authorization: Bearer {KEY}\r\n".encode()
    request = head("GET", "/api/v1/ping", {}).replace(b"\r\n\r\n", b"\r\n" + key + key + b"\r\n")
    raw = http1(gateway.http_port, request)
    assert_refusal(raw.json(), *python_verdict(f"Bearer {KEY},Bearer {KEY}") or ())
    assert recorder.count() == before


# ---------------------------------------------------------------- headers before the body


def test_a_call_without_a_key_is_refused_before_its_body(
    gateway: EnvoyProcess, recorder: Recorder
) -> None:
    """The issue's attack: 870 KB announced to fan/resolve without a key. The answer comes
    although not one byte of the body was sent."""
    before = recorder.count()
    raw = http1(gateway.http_port, head("POST", "/api/v1/fan/resolve", JSON, length=870_000))
    assert raw.status == 401
    assert_refusal(raw.json(), CodigoError.NO_AUTENTICADO, keys.FALTA_AUTHORIZATION)
    raw = http1(
        gateway.http_port,
        head("POST", "/api/v1/codes", {**JSON, "Authorization": "Bearer lp_vivo_corta"}, length=1),
    )
    assert_refusal(raw.json(), CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)
    assert recorder.count() == before


@pytest.mark.parametrize("binding", [name for name, b in BINDINGS.items() if b.body])
def test_a_content_length_over_the_limit_is_refused_from_the_headers(
    gateway: EnvoyProcess, recorder: Recorder, binding: str
) -> None:
    method, path = binding.split(" ")
    limit = BINDINGS[binding].limit
    before = recorder.count()
    for length in (limit + 1, 10 * limit, 2**40):
        raw = http1(gateway.http_port, head(method, path, {**AUTH, **JSON}, length=length))
        assert raw.status == 413
        assert_refusal(raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    assert recorder.count() == before


@pytest.mark.parametrize("binding", [name for name, b in BINDINGS.items() if not b.body])
def test_a_get_announcing_a_body_is_refused_from_the_headers(
    gateway: EnvoyProcess, recorder: Recorder, binding: str
) -> None:
    method, path = binding.split(" ")
    before = recorder.count()
    raw = http1(gateway.http_port, head(method, path, {**AUTH, **JSON}, length=100_000))
    assert raw.status == 400
    assert_refusal(raw.json(), CodigoError.SOLICITUD_INVALIDA, edge_limits.no_body(binding))
    assert recorder.count() == before


def test_a_body_at_the_limit_reaches_the_server(gateway: EnvoyProcess, recorder: Recorder) -> None:
    for binding in ("POST /api/v1/tx", "POST /api/v1/fan/resolve"):
        limit = BINDINGS[binding].limit
        padding = limit - len(b'{"fan":"A","x":""}')
        body = json.dumps({"fan": "A", "x": "p" * padding}, separators=(",", ":")).encode()
        assert len(body) == limit
        path = binding.split(" ")[1]
        before = recorder.count()
        raw = http1(gateway.http_port, head("POST", path, {**AUTH, **JSON}, length=len(body)), body)
        assert raw.status == 200, raw.body
        assert recorder.count() == before + 1
        # The same body chunked (no Content-Length) too.
        raw = http1(
            gateway.http_port,
            head("POST", path, {**AUTH, **JSON, "Transfer-Encoding": "chunked"}),
            chunked(body) + b"0\r\n\r\n",
        )
        assert raw.status == 200, raw.body
        assert recorder.count() == before + 2


@pytest.mark.parametrize(
    "binding", ["POST /api/v1/tx", "POST /api/v1/fan/resolve", "POST /api/v1/ping"]
)
def test_a_chunked_body_is_cut_at_its_limit(
    gateway: EnvoyProcess, recorder: Recorder, binding: str
) -> None:
    """HTTP/1.1 chunked: the 413 comes once the limit is passed, without the body's end."""
    method, path = binding.split(" ")
    before = recorder.count()
    raw = http1(
        gateway.http_port,
        head(method, path, {**AUTH, **JSON, "Transfer-Encoding": "chunked"}),
        chunked(b"{" + b" " * BINDINGS[binding].limit),
    )
    assert raw.status == 413
    assert_refusal(raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    assert recorder.count() == before


def test_a_chunked_body_on_a_get_is_cut_at_the_floor(
    gateway: EnvoyProcess, recorder: Recorder
) -> None:
    before = recorder.count()
    raw = http1(
        gateway.http_port,
        head("GET", "/api/v1/roster", {**AUTH, **JSON, "Transfer-Encoding": "chunked"}),
        chunked(b"{" + b" " * FLOOR),
    )
    assert raw.status == 413
    assert_refusal(
        raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.no_body("GET /api/v1/roster")
    )
    assert recorder.count() == before


@pytest.mark.parametrize("binding", ["POST /api/v1/tx", "POST /api/v1/fan/resolve"])
def test_an_h2_body_without_content_length_is_cut_at_its_limit(
    gateway: EnvoyProcess, recorder: Recorder, binding: str
) -> None:
    method, path = binding.split(" ")
    before = recorder.count()
    limit = BINDINGS[binding].limit
    answer = h2c_stream(
        gateway.http_port,
        h2_fields(method, path, {**AUTH, **JSON}),
        [b"{", b" " * (limit // 2), b" " * (limit // 2)],
        end_stream=False,
    )
    assert_refusal(answer, CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    # Over HTTP/2 a Content-Length over the limit is refused from the headers too.
    answer = h2c_stream(
        gateway.http_port,
        h2_fields(method, path, {**AUTH, **JSON, "content-length": str(limit + 1)}),
        [],
        end_stream=False,
    )
    assert_refusal(answer, CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    # ... and without a key the body does not matter.
    answer = h2c_stream(gateway.http_port, h2_fields(method, path, JSON), [b"{"], end_stream=False)
    assert_refusal(answer, CodigoError.NO_AUTENTICADO, keys.FALTA_AUTHORIZATION)
    assert recorder.count() == before


@pytest.mark.parametrize("binding", sorted(BINDINGS))
def test_every_413_names_its_routes_limit_in_spanish(
    gateway: EnvoyProcess, recorder: Recorder, binding: str
) -> None:
    """Issue 23 §3: a body without Content-Length over its route's limit, cut off by the
    buffer filter (whose own text is "Payload Too Large"), is answered with the same
    detalle as the Content-Length refusal: the operation and its limit, in Spanish
    (edge_limits.too_large; a GET takes no body and is cut at FLOOR). HTTP/1.1 chunked,
    and HTTP/2 sending within the windows Envoy grants, as a real client does."""
    method, path = binding.split(" ")
    over = max(BINDINGS[binding].limit, FLOOR) + 1
    before = recorder.count()
    raw = http1(
        gateway.http_port,
        head(method, path, {**AUTH, **JSON, "Transfer-Encoding": "chunked"}),
        chunked(b"{" + b" " * over, size=16384),
    )
    assert raw.status == 413
    assert_refusal(raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    with H2Connection(gateway.http_port) as connection:
        stream = connection.request(
            path.encode(),
            method=method.encode(),
            headers=[(name.encode(), value.encode()) for name, value in {**AUTH, **JSON}.items()],
        )
        connection.send(stream, b"{" + b" " * over, end=True)
        answer = connection.answer(stream)
    assert_refusal(answer, CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    assert recorder.count() == before


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        ("/api/v1/nope", ""),
        ("/api/v1/ping/x", "; ¿quiso decir /api/v1/ping?"),
        ("/api/v1/TX", "; ¿quiso decir /api/v1/tx?"),
        ("/api/v1/", ""),
    ],
)
def test_an_unknown_path_is_answered_from_its_headers(
    gateway: EnvoyProcess, recorder: Recorder, path: str, hint: str
) -> None:
    before = recorder.count()
    for headers in ({}, AUTH):
        raw = http1(gateway.http_port, head("POST", path, {**headers, **JSON}, length=500_000))
        assert raw.status == 404
        detalle = f"No existe POST {path}{hint}" + ("" if hint else ".")
        assert_refusal(raw.json(), CodigoError.RUTA_NO_ENCONTRADA, detalle)
    assert recorder.count() == before


@pytest.mark.parametrize("headers", [{}, AUTH])
def test_a_wrong_method_is_answered_from_its_headers(
    gateway: EnvoyProcess, recorder: Recorder, headers: dict[str, str]
) -> None:
    """405 before the key or the body: the method alone decides (a body announced over any
    limit is never read)."""
    before = recorder.count()
    raw = http1(gateway.http_port, head("PUT", "/api/v1/tx", {**headers, **JSON}, length=500_000))
    assert raw.status == 405
    assert raw.headers[b"allow"] == b"POST"
    assert_refusal(
        raw.json(), CodigoError.METODO_NO_PERMITIDO, "/api/v1/tx se llama con POST, no con PUT"
    )
    assert recorder.count() == before


@pytest.mark.parametrize(
    "variant",
    [
        "/api/v1/fan/resolve/",
        "/api/v1/fan//resolve//",
        "/api/v1/f%61n/resolve",
        "/api/./v1/fan/resolve",
    ],
)
def test_every_form_of_a_binding_gets_its_limits(
    gateway: EnvoyProcess, recorder: Recorder, variant: str
) -> None:
    """A path the transcoder maps to fan/resolve matches its route: its key check and its
    limit, and a body within it reaches the server."""
    binding = "POST /api/v1/fan/resolve"
    limit = BINDINGS[binding].limit
    before = recorder.count()
    raw = http1(gateway.http_port, head("POST", variant, JSON, length=limit + 1))
    assert_refusal(raw.json(), CodigoError.NO_AUTENTICADO, keys.FALTA_AUTHORIZATION)
    raw = http1(gateway.http_port, head("POST", variant, {**AUTH, **JSON}, length=limit + 1))
    assert_refusal(raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    raw = http1(
        gateway.http_port,
        head("POST", variant, {**AUTH, **JSON, "Transfer-Encoding": "chunked"}),
        chunked(b"{" + b" " * limit),
    )
    assert_refusal(raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.too_large(binding))
    assert recorder.count() == before
    body = b'{"fan":"A"}'
    raw = http1(gateway.http_port, head("POST", variant, {**AUTH, **JSON}, length=len(body)), body)
    assert raw.status == 200, raw.body
    assert recorder.count() == before + 1


def test_other_routes_are_bounded_by_the_floor(gateway: EnvoyProcess) -> None:
    """The OpenAPI document and paths outside /api/v1/ read at most FLOOR bytes (a GET
    with a body for the document: any other method is refused from its headers)."""
    for method, path in (("GET", "/api/v1/openapi.json"), ("POST", "/nada")):
        raw = http1(
            gateway.http_port,
            head(method, path, {**JSON, "Transfer-Encoding": "chunked"}),
            chunked(b" " * (FLOOR + 1)),
        )
        assert raw.status == 413
        assert_refusal(
            raw.json(), CodigoError.SOLICITUD_MUY_GRANDE, edge_limits.TOO_LARGE_ELSEWHERE
        )


# ---------------------------------------------------------------- the parse limits


def test_an_object_with_too_many_members(client: httpx.Client, recorder: Recorder) -> None:
    before = recorder.count()
    for body in (
        {f"k{i}": 1 for i in range(MAX_MEMBERS + 1)},
        {"x": {f"k{i}": 1 for i in range(MAX_MEMBERS + 1)}},
    ):
        response = client.post("/api/v1/tx", json=body, headers=AUTH)
        assert_response(
            response,
            CodigoError.SOLICITUD_MUY_GRANDE,
            edge_limits.too_many_members("POST /api/v1/tx"),
        )
    response = client.post(
        "/api/v1/tx", json={f"k{i}": 1 for i in range(MAX_MEMBERS)}, headers=AUTH
    )
    assert response.status_code == 200
    assert recorder.count() == before + 1


def test_a_list_with_too_many_elements(client: httpx.Client, recorder: Recorder) -> None:
    before = recorder.count()
    many = BINDINGS["POST /api/v1/tx"].max_elements + 1
    response = client.post("/api/v1/tx", json={"importe": [1] * many}, headers=AUTH)
    text = edge_limits.too_many_elements("POST /api/v1/tx")
    assert_response(response, CodigoError.SOLICITUD_MUY_GRANDE, text % "importe")
    response = client.post("/api/v1/tx", json={"otro": [[1] * many]}, headers=AUTH)
    assert_response(response, CodigoError.SOLICITUD_MUY_GRANDE, text % "cuerpo")
    response = client.post("/api/v1/redeem", json={"otro": [1] * (MAX_CODIGOS + 1)}, headers=AUTH)
    assert_response(
        response,
        CodigoError.SOLICITUD_MUY_GRANDE,
        edge_limits.too_many_elements("POST /api/v1/redeem") % "cuerpo",
    )
    assert recorder.count() == before


@pytest.mark.parametrize(
    ("path", "field", "most"),
    [
        ("/api/v1/codes", "codigos", MAX_CODES_PER_CALL),
        ("/api/v1/codes", "codes", MAX_CODES_PER_CALL),
        ("/api/v1/redeem", "codigos", MAX_CODIGOS),
    ],
)
def test_too_many_codes_is_the_servers_demasiados_codigos(
    client: httpx.Client, recorder: Recorder, path: str, field: str, most: int
) -> None:
    before = recorder.count()
    body = {field: [f"C{i}" for i in range(most + 1)]}
    response = client.post(path, json={"promo": 1, **body}, headers=AUTH)
    assert_response(response, CodigoError.DEMASIADOS_CODIGOS, too_many_codes(field, most))
    assert recorder.count() == before
    # The largest list passes.
    body = {field: [f"C{i}" for i in range(most)]}
    response = client.post(path, json={"promo": 1, **body}, headers=AUTH)
    assert response.status_code == 200, response.text
    assert recorder.count() == before + 1


def test_nesting_deeper_than_the_limit(client: httpx.Client, recorder: Recorder) -> None:
    before = recorder.count()
    deep = "[" * (MAX_DEPTH) + "]" * (MAX_DEPTH)
    response = client.post("/api/v1/tx", content='{"x":' + deep + "}", headers={**AUTH, **JSON})
    detalle = assert_response(response, CodigoError.SOLICITUD_INVALIDA)
    assert detalle.endswith(f"anidado a más de {MAX_DEPTH} niveles")
    shallow = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    response = client.post("/api/v1/tx", content='{"x":' + shallow + "}", headers={**AUTH, **JSON})
    assert response.status_code == 200, response.text
    assert recorder.count() == before + 1


def test_parse_limits_over_h2c(gateway: EnvoyProcess, recorder: Recorder) -> None:
    before = recorder.count()
    body = json.dumps({"codigos": [f"C{i}" for i in range(MAX_CODIGOS + 1)]}).encode()
    answer = h2c_stream(
        gateway.http_port, h2_fields("POST", "/api/v1/redeem", {**AUTH, **JSON}), [body]
    )
    assert_refusal(answer, CodigoError.DEMASIADOS_CODIGOS, too_many_codes("codigos", MAX_CODIGOS))
    body = json.dumps({f"k{i}": 1 for i in range(MAX_MEMBERS + 1)}).encode()
    answer = h2c_stream(
        gateway.http_port, h2_fields("POST", "/api/v1/fan/resolve", {**AUTH, **JSON}), [body]
    )
    assert_refusal(
        answer,
        CodigoError.SOLICITUD_MUY_GRANDE,
        edge_limits.too_many_members("POST /api/v1/fan/resolve"),
    )
    assert recorder.count() == before


# ---------------------------------------------------------------- gRPC content types


GRPC_TYPES = ["application/grpc", "application/grpc+proto", "application/grpc+json"]
ROUTES = [*BINDINGS, "POST /api/v1/nope", "GET /api/v1/openapi.json"]


@pytest.mark.parametrize("content_type", GRPC_TYPES)
@pytest.mark.parametrize("route", ROUTES)
def test_a_grpc_content_type_under_api_v1_names_the_one_the_api_takes(
    gateway: EnvoyProcess, recorder: Recorder, route: str, content_type: str
) -> None:
    """Issue 22 §4: was 500 error_interno with an empty detalle (Envoy turned the strict
    check's 400 into a gRPC status). Now, from the headers, whatever the body and key:
    400 solicitud_invalida naming application/json, over HTTP/1.1 and h2c."""
    method, path = route.split(" ")
    before = recorder.count()
    for headers in ({"content-type": content_type}, {**AUTH, "content-type": content_type}):
        for body in (b"", b"{}", b"\x00\x00\x00\x00\x02{}", b"x" * (FLOOR * 3)):
            raw = http1(gateway.http_port, head(method, path, headers, length=len(body)), body)
            assert raw.status == 400, (route, raw.body)
            assert raw.headers[b"content-type"] == b"application/json"
            assert_refusal(
                raw.json(), CodigoError.SOLICITUD_INVALIDA, edge_limits.CONTENT_TYPE_JSON
            )
        answer = h2c_stream(
            gateway.http_port, h2_fields(method, path, headers), [b"\x00\x00\x00\x00\x02{}"]
        )
        assert_refusal(answer, CodigoError.SOLICITUD_INVALIDA, edge_limits.CONTENT_TYPE_JSON)
    assert recorder.count() == before


@pytest.mark.parametrize("content_type", ["application/grpc-web", "application/grpc-web-text"])
@pytest.mark.parametrize("route", [name for name, b in BINDINGS.items() if b.body])
def test_grpc_web_is_another_wrong_content_type(
    client: httpx.Client, recorder: Recorder, route: str, content_type: str
) -> None:
    """Envoy does not take grpc-web for gRPC: the strict check refuses its body as it
    refuses text/plain (after the key)."""
    before = recorder.count()
    path = route.split(" ")[1]
    response = client.post(path, content=b"{}", headers={**AUTH, "content-type": content_type})
    assert_response(response, CodigoError.SOLICITUD_INVALIDA, edge_limits.CONTENT_TYPE_JSON)
    response = client.post(path, content=b"{}", headers={"content-type": content_type})
    assert_response(response, CodigoError.NO_AUTENTICADO, keys.FALTA_AUTHORIZATION)
    assert recorder.count() == before


@pytest.mark.parametrize("content_type", GRPC_TYPES)
def test_grpc_outside_api_v1_is_still_not_found(gateway: EnvoyProcess, content_type: str) -> None:
    for body in (b"", b"x" * (FLOOR * 3)):
        raw = http1(
            gateway.http_port,
            head(
                "POST",
                "/loyalty.v1.BackofficeService/ListPrograms",
                {"content-type": content_type},
                length=len(body),
            ),
            body,
        )
        assert raw.status == 404
        assert_refusal(
            raw.json(),
            CodigoError.RUTA_NO_ENCONTRADA,
            f"No existe POST {shown('/loyalty.v1.BackofficeService/ListPrograms', quote=False)}.",
        )


# ---------------------------------------------------------------- the address verdict


def client_from(gateway: EnvoyProcess, source: str) -> httpx.Client:
    """A client whose connections come from `source` (any 127.0.0.0/8 address reaches the
    loopback listener): another client address for the gateway."""
    return httpx.Client(
        base_url=gateway.url,
        timeout=TIMEOUT,
        transport=httpx.HTTPTransport(local_address=source),
    )


@pytest.fixture
def verdict_gateway(grpc_port: int, tmp_path: Path) -> Iterator[EnvoyProcess]:
    """A gateway of its own (its memory starts empty) for each test."""
    proxy = start_gateway(grpc_port, tmp_path / "envoy")
    yield proxy
    proxy.stop()


def ping(http: httpx.Client, key: str | None) -> httpx.Response:
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    return http.get("/api/v1/ping", headers=headers)


def test_an_address_the_server_blocked_is_refused_from_the_headers(
    verdict_gateway: EnvoyProcess, recorder: Recorder
) -> None:
    good = random_key()
    with (
        client_from(verdict_gateway, "127.0.0.1") as here,
        client_from(verdict_gateway, "127.0.0.2") as there,
    ):
        assert ping(here, good).status_code == 200  # the gateway sees it work
        # The server's verdict: a 429 with the address-blocked metadata (not shown).
        verdict = ping(here, BLOCKING)
        assert_response(verdict, CodigoError.DEMASIADAS_LLAMADAS, BLOCKED_DETALLE)
        assert verdict.headers["retry-after"] == str(SECONDS_BLOCKED)

        # Any key not seen working, from that address: refused without the server, the
        # server's own envelope, Retry-After counting down.
        before = recorder.count()
        for _ in range(3):
            refused = ping(here, random_key())
            assert refused.content == verdict.content
            assert_response(refused, CodigoError.DEMASIADAS_LLAMADAS, BLOCKED_DETALLE)
            assert 0 < int(refused.headers["retry-after"]) <= SECONDS_BLOCKED
        refused = here.post("/api/v1/tx", json={}, headers={"authorization": f"Bearer {REVOKED}"})
        assert_response(refused, CodigoError.DEMASIADAS_LLAMADAS, BLOCKED_DETALLE)
        assert recorder.count() == before
        # Over h2c too.
        answer = h2c_stream(
            verdict_gateway.http_port,
            h2_fields("GET", "/api/v1/ping", {"authorization": f"Bearer {random_key()}"}),
            [],
        )
        assert answer == verdict.json()
        assert recorder.count() == before

        # The key that worked keeps working from there; a call without a key is still 401.
        assert ping(here, good).status_code == 200
        assert recorder.count() == before + 1
        assert_response(ping(here, None), CodigoError.NO_AUTENTICADO, keys.FALTA_AUTHORIZATION)
        # Another address is not affected.
        assert ping(there, random_key()).status_code == 200
        assert recorder.count() == before + 2


def test_a_key_the_server_refused_is_forgotten(
    verdict_gateway: EnvoyProcess, recorder: Recorder
) -> None:
    key = random_key()
    with (
        client_from(verdict_gateway, "127.0.0.1") as here,
        client_from(verdict_gateway, "127.0.0.2") as there,
    ):
        assert ping(there, key).status_code == 200  # seen working
        assert_response(ping(here, BLOCKING), CodigoError.DEMASIADAS_LLAMADAS)
        assert ping(here, key).status_code == 200  # still known
        with recorder.lock:
            recorder.revoked.add(key)
        assert_response(ping(there, key), CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)
        before = recorder.count()
        assert_response(ping(here, key), CodigoError.DEMASIADAS_LLAMADAS, BLOCKED_DETALLE)
        assert recorder.count() == before
        # A key the server refused from the start is never known.
        assert_response(ping(there, REVOKED), CodigoError.CLAVE_INVALIDA)
        assert_response(ping(here, REVOKED), CodigoError.DEMASIADAS_LLAMADAS)
        assert recorder.count() == before + 1


def test_a_block_ends_when_the_server_said(
    verdict_gateway: EnvoyProcess, recorder: Recorder
) -> None:
    """A verdict of 1 s: refused at once, then (waiting at most TIMEOUT for the second to
    pass) the server decides again."""
    with client_from(verdict_gateway, "127.0.0.3") as here:
        assert_response(ping(here, BLOCKING_BRIEFLY), CodigoError.DEMASIADAS_LLAMADAS)
        key = random_key()
        before = recorder.count()
        first = ping(here, key)
        if first.status_code == 429:  # (unless that second has passed already)
            assert recorder.count() == before
        deadline = time.monotonic() + TIMEOUT
        while ping(here, key).status_code != 200:
            assert time.monotonic() < deadline, "the block did not end"
            time.sleep(0.2)
        assert recorder.count() > before


def small_tables(tmp: Path) -> Path:
    """The gateway folder with the edge's tables holding at most 2 entries per generation."""
    copy = Path(shutil.copytree(GATEWAY, tmp / "gateway"))
    lua = (copy / "envelope.lua").read_text(encoding="utf-8")
    line = (
        f"local KNOWN_KEYS, KNOWN_KEY_SECONDS = {edge_limits.KNOWN_KEYS}, "
        f"{edge_limits.KNOWN_KEY_SECONDS}"
    )
    assert line in lua
    lua = lua.replace(
        line, f"local KNOWN_KEYS, KNOWN_KEY_SECONDS = 2, {edge_limits.KNOWN_KEY_SECONDS}"
    )
    (copy / "envelope.lua").write_text(lua, encoding="utf-8")
    return copy


def test_the_memory_of_keys_is_bounded(grpc_port: int, recorder: Recorder, tmp_path: Path) -> None:
    """With 2 entries per generation, the 5th key learned pushes out the 1st and 2nd (and
    a key used again stays)."""
    proxy = start_gateway(grpc_port, tmp_path / "envoy", small_tables(tmp_path))
    try:
        learned = [random_key() for _ in range(5)]
        with client_from(proxy, "127.0.0.1") as here, client_from(proxy, "127.0.0.2") as there:
            for key in learned:
                assert ping(there, key).status_code == 200
            assert_response(ping(here, BLOCKING), CodigoError.DEMASIADAS_LLAMADAS)
            assert ping(here, learned[4]).status_code == 200
            assert ping(here, learned[3]).status_code == 200
            for forgotten in learned[:2]:
                assert_response(ping(here, forgotten), CodigoError.DEMASIADAS_LLAMADAS)
    finally:
        proxy.stop()


def test_envoy_logged_no_lua_error(gateway: EnvoyProcess) -> None:
    assert gateway.poll() is None
    log = gateway.log_path.read_text(encoding="utf-8", errors="replace")
    assert "envelope.lua" not in log
    assert "request_check.lua" not in log
    assert "script log" not in log
