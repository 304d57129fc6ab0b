"""The real Envoy (gateway/envoy.yaml + envelope.lua) in front of a tiny in-test gRPC
server: every response a POS terminal can get is the envelope, with the catalogue's
status and mensaje, `ok` first, Content-Type application/json and no internal header;
native gRPC through Envoy's HTTP port never reaches the server.

The in-test server speaks the error protocol of the real one (api/errors.py): a
trailers-only gRPC error whose metadata carries `x-http-status`, `x-envelope` (ASCII JSON)
and `grpc-status-details-bin`.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from loyalty_grpc.api import edge_limits
from loyalty_grpc.domain.detalle import ELLIPSIS, MAX_DETALLE, shown
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.gen.loyalty.v1 import (
    backoffice_service_pb2,
    backoffice_service_pb2_grpc,
    pos_service_pb2,
    pos_service_pb2_grpc,
)
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess
from tests.e2e.fake_server import envelope_text, grpc_server, server_error, start_gateway
from tests.e2e.support import h2c_stream
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
INTERNAL_DETAILS = "Traceback: psycopg.OperationalError at 10.0.0.7"
# A well-formed key: the gateway refuses a call without one from its headers (the in-test
# server takes any).
KEY_HEADER = {"authorization": "Bearer lp_prueba_" + "K" * 32}


def envelope_bytes(codigo: CodigoError, detalle: str) -> bytes:
    return envelope_text(codigo, detalle).encode()


class Calls:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []

    def record(self, name: str) -> None:
        with self.lock:
            self.names.append(name)


class Pos(pos_service_pb2_grpc.PosServiceServicer):
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def Ping(self, request, context):  # noqa: N802
        self.calls.record("Ping")
        return pos_service_pb2.PingResponse(
            ok=True,
            data=pos_service_pb2.PingData(
                integracion="Caja Norte",
                programa="Club Halcones",
                modo="prueba",
                permisos=["fan:leer"],
                hora="2026-01-01T00:00:00Z",
            ),
        )

    def PingGet(self, request, context):  # noqa: N802
        self.calls.record("PingGet")
        context.set_trailing_metadata((("x-internal-trailer", "secreto"),))
        return pos_service_pb2.PingGetResponse(
            ok=True,
            data=pos_service_pb2.PingGetData(
                programa="Club Halcones", modo="prueba", hora="2026-01-01T00:00:00Z"
            ),
        )

    def ResolveFan(self, request, context):  # noqa: N802
        self.calls.record("ResolveFan")
        context.abort_with_status(
            server_error(CodigoError.FAN_NO_ENCONTRADO, f"Ningún fan con «{request.fan}».")
        )

    def RegisterTx(self, request, context):  # noqa: N802
        # A failure without the envelope (a bug, or a server without the interceptor).
        self.calls.record("RegisterTx")
        context.abort(grpc.StatusCode.INTERNAL, INTERNAL_DETAILS)

    def DepositCodes(self, request, context):  # noqa: N802
        self.calls.record("DepositCodes")
        context.abort_with_status(server_error(CodigoError.PROMO_NO_ENCONTRADA, "promo 7"))


class Backoffice(backoffice_service_pb2_grpc.BackofficeServiceServicer):
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def ListPrograms(self, request, context):  # noqa: N802
        self.calls.record("ListPrograms")
        return backoffice_service_pb2.ListProgramsResponse()


@pytest.fixture(scope="module")
def calls() -> Calls:
    return Calls()


@pytest.fixture(scope="module")
def grpc_port(calls: Calls) -> Iterator[int]:
    # The methods left out answer UNIMPLEMENTED (grpcio's default), like a server without
    # the error interceptor would.
    pos = Pos(calls)  # type: ignore[abstract]
    backoffice = Backoffice(calls)  # type: ignore[abstract]
    with grpc_server(
        lambda server: pos_service_pb2_grpc.add_PosServiceServicer_to_server(pos, server),
        lambda server: backoffice_service_pb2_grpc.add_BackofficeServiceServicer_to_server(
            backoffice, server
        ),
    ) as port:
        yield port


@pytest.fixture(scope="module")
def gateway(grpc_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    proxy = start_gateway(grpc_port, tmp_path_factory.mktemp("envoy"))
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def gateway_without_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    """Envoy pointed at a port where nothing listens."""
    proxy = start_gateway(free_port(), tmp_path_factory.mktemp("envoy-down"))
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def client(gateway: EnvoyProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30, headers=KEY_HEADER) as http:
        yield http


def assert_no_internal_headers(headers: httpx.Headers) -> None:
    for name in headers:
        lowered = name.lower()
        assert not lowered.startswith("grpc-"), name
        assert not lowered.startswith("x-envoy-"), name
        assert lowered not in ("x-envelope", "x-http-status", "x-internal-trailer", "server")


def assert_envelope(response: httpx.Response, codigo: CodigoError) -> dict[str, str]:
    """The response is the envelope of `codigo`: status, content type, exact mensaje,
    keys in order, and the bytes exactly as json.dumps(ensure_ascii) writes them."""
    entrada = CATALOGO[codigo]
    assert response.status_code == entrada.http, response.text
    assert response.headers["content-type"] == "application/json"
    assert_no_internal_headers(response.headers)
    body = json.loads(response.content, object_pairs_hook=list)
    assert [key for key, _ in body] == ["ok", "error"]
    assert body[0] == ("ok", False)
    error = body[1][1]
    assert [key for key, _ in error] == ["codigo", "mensaje", "detalle"]
    fields = dict(error)
    assert fields["codigo"] == codigo.value
    assert fields["mensaje"] == entrada.mensaje
    assert response.content == envelope_bytes(codigo, fields["detalle"])
    return fields


def raw_request(
    gateway: EnvoyProcess, method: str, path: str
) -> tuple[int, bytes, list[tuple[str, str]]]:
    """A request with the key, the path sent exactly as written (httpx would normalise it);
    header names in lower case."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway.http_port, timeout=30)
    try:
        connection.request(method, path, headers=KEY_HEADER)
        response = connection.getresponse()
        headers = [(name.lower(), value) for name, value in response.getheaders()]
        return response.status, response.read(), headers
    finally:
        connection.close()


# ---------------------------------------------------------------- success


def test_success_is_the_transcoded_envelope(client: httpx.Client) -> None:
    response = client.post("/api/v1/ping", json={})
    assert response.status_code == 200
    assert response.content.startswith(b'{"ok":true,"data":')
    assert response.headers["content-type"] == "application/json"
    assert_no_internal_headers(response.headers)
    assert response.json()["data"]["permisos"] == ["fan:leer"]


def test_get_ignores_unknown_query_parameters_and_hides_trailers(client: httpx.Client) -> None:
    response = client.get("/api/v1/ping", params={"desconocido": "1"})
    assert response.status_code == 200
    assert response.content.startswith(b'{"ok":true,"data":')
    assert_no_internal_headers(response.headers)


# ---------------------------------------------------------------- server errors


def test_server_error_becomes_its_envelope(client: httpx.Client) -> None:
    response = client.post("/api/v1/fan/resolve", json={"fan": "HAL9999"})
    fields = assert_envelope(response, CodigoError.FAN_NO_ENCONTRADO)
    assert fields["detalle"] == "Ningún fan con «HAL9999»."
    assert response.content == envelope_bytes(
        CodigoError.FAN_NO_ENCONTRADO, "Ningún fan con «HAL9999»."
    )


def test_another_server_error_keeps_its_status(client: httpx.Client) -> None:
    response = client.post("/api/v1/codes", json={"promo": 7, "codigos": ["A"]})
    assert response.content == envelope_bytes(CodigoError.PROMO_NO_ENCONTRADA, "promo 7")
    assert_envelope(response, CodigoError.PROMO_NO_ENCONTRADA)


def test_server_error_without_envelope_leaks_nothing(client: httpx.Client) -> None:
    response = client.post("/api/v1/tx", json={"id_externo": "1"})
    fields = assert_envelope(response, CodigoError.ERROR_INTERNO)
    assert "psycopg" not in response.text
    assert fields["detalle"] == ""


def test_unimplemented_method_is_no_implementado(client: httpx.Client) -> None:
    response = client.get("/api/v1/promos")  # the in-test server does not implement it
    assert_envelope(response, CodigoError.NO_IMPLEMENTADO)


# ---------------------------------------------------------------- Envoy's own replies


def test_malformed_json_is_solicitud_invalida(client: httpx.Client, calls: Calls) -> None:
    before = len(calls.names)
    response = client.post(
        "/api/v1/fan/resolve",
        content=b'{"fan": "HAL0001"',
        headers={"content-type": "application/json"},
    )
    fields = assert_envelope(response, CodigoError.SOLICITUD_INVALIDA)
    assert fields["detalle"]  # Envoy's reason
    assert len(calls.names) == before


def test_wrong_json_type_names_the_field(client: httpx.Client) -> None:
    response = client.post("/api/v1/fan/resolve", json={"fan": 12345})
    fields = assert_envelope(response, CodigoError.SOLICITUD_INVALIDA)
    assert "fan" in fields["detalle"]


def test_reason_with_quotes_and_bytes_stays_valid_json(client: httpx.Client) -> None:
    response = client.post(
        "/api/v1/fan/resolve",
        content=b'{"fan": "\xff\xfe\\"" "x\n\t}',
        headers={"content-type": "application/json"},
    )
    assert_envelope(response, CodigoError.SOLICITUD_INVALIDA)
    assert response.content.isascii()


@pytest.mark.parametrize(
    "path", ["/api/v1/nope", "/nope", "/", "/api/v1", "/loyalty.v1.BackofficeService/ListPrograms"]
)
def test_unknown_path_is_ruta_no_encontrada(client: httpx.Client, path: str) -> None:
    fields = assert_envelope(client.get(path), CodigoError.RUTA_NO_ENCONTRADA)
    assert fields["detalle"] == f"No existe GET {shown(path, quote=False)}."


# ---------------------------------------------------------------- wrong calls say what is right


@pytest.mark.parametrize(
    ("method", "path", "allow", "detalle"),
    [
        ("GET", "/api/v1/tx", "POST", "/api/v1/tx se llama con POST, no con GET"),
        ("PUT", "/api/v1/tx", "POST", "/api/v1/tx se llama con POST, no con PUT"),
        (
            "DELETE",
            "/api/v1/ping",
            "GET, POST",
            "/api/v1/ping se llama con GET o POST, no con DELETE",
        ),
        (
            "TRACE",
            "/api/v1/fan/resolve",
            "POST",
            "/api/v1/fan/resolve se llama con POST, no con TRACE",
        ),
        ("PATCH", "/api/v1/promos", "GET", "/api/v1/promos se llama con GET, no con PATCH"),
        ("OPTIONS", "/api/v1/redeem", "POST", "/api/v1/redeem se llama con POST, no con OPTIONS"),
        (
            "POST",
            "/api/v1/openapi.json",
            "GET",
            "/api/v1/openapi.json se llama con GET, no con POST",
        ),
        # A binding's other forms (a trailing slash, merged slashes) are its path.
        (
            "PUT",
            "/api/v1/roster/",
            "GET, POST",
            "/api/v1/roster se llama con GET o POST, no con PUT",
        ),
        ("GET", "/api/v1//tx//", "POST", "/api/v1/tx se llama con POST, no con GET"),
        ("GET", "/api/v1/t%78", "POST", "/api/v1/tx se llama con POST, no con GET"),
        ("GET", "/api/./v1/fan/../tx", "POST", "/api/v1/tx se llama con POST, no con GET"),
    ],
)
def test_a_wrong_method_is_405_with_allow(
    gateway: EnvoyProcess, calls: Calls, method: str, path: str, allow: str, detalle: str
) -> None:
    """A path the gateway serves, with a method it does not take: 405, `Allow` (the proto's
    bindings), the method to use; answered from the headers, nothing reaches the server."""
    before = list(calls.names)
    status, body, headers = raw_request(gateway, method, path)
    assert status == 405
    assert dict(headers)["allow"] == allow
    assert dict(headers)["content-type"] == "application/json"
    assert body == envelope_bytes(CodigoError.METODO_NO_PERMITIDO, detalle)
    assert calls.names == before


@pytest.mark.parametrize("path", ["/api/v1/ping", "/api/v1/openapi.json"])
def test_head_is_405_with_allow_and_no_body(gateway: EnvoyProcess, path: str) -> None:
    """HEAD is not served (the transcoder binds no HEAD): 405 with `Allow`, the body's
    length announced and no body sent, as HTTP wants for HEAD."""
    status, body, headers = raw_request(gateway, "HEAD", path)
    assert status == 405
    assert "GET" in dict(headers)["allow"]
    assert body == b""
    assert int(dict(headers)["content-length"]) > 0


@pytest.mark.parametrize(
    ("method", "path", "detalle"),
    [
        ("GET", "/api/v1/pingg", "No existe GET /api/v1/pingg; ¿quiso decir /api/v1/ping?"),
        ("GET", "/api/v1/Ping", "No existe GET /api/v1/Ping; ¿quiso decir /api/v1/ping?"),
        ("GET", "/api/v2/ping", "No existe GET /api/v2/ping; ¿quiso decir /api/v1/ping?"),
        ("GET", "/ping", "No existe GET /ping; ¿quiso decir /api/v1/ping?"),
        ("GET", "/api/ping/", "No existe GET /api/ping/; ¿quiso decir /api/v1/ping?"),
        (
            "POST",
            "/api/v1/fan/resolv",
            "No existe POST /api/v1/fan/resolv; ¿quiso decir /api/v1/fan/resolve?",
        ),
        (
            "GET",
            "/api/v1/fan/resolv",
            "No existe GET /api/v1/fan/resolv; ¿quiso decir /api/v1/fan/resolve? "
            "(/api/v1/fan/resolve se llama con POST)",
        ),
        ("POST", "/v1/TX", "No existe POST /v1/TX; ¿quiso decir /api/v1/tx?"),
        (
            "GET",
            "/api/v1/openapi.json/",
            "No existe GET /api/v1/openapi.json/; ¿quiso decir /api/v1/openapi.json?",
        ),
        # Nothing close: no hint.
        ("GET", "/api/v1/", "No existe GET /api/v1/."),
        ("GET", "/api/v1/nada/mas", "No existe GET /api/v1/nada/mas."),
        ("GET", "/api/v3", "No existe GET /api/v3."),
    ],
)
def test_an_unknown_path_suggests_the_one_close_to_it(
    gateway: EnvoyProcess, calls: Calls, method: str, path: str, detalle: str
) -> None:
    before = list(calls.names)
    status, body, headers = raw_request(gateway, method, path)
    assert status == 404
    assert "allow" not in dict(headers)
    assert body == envelope_bytes(CodigoError.RUTA_NO_ENCONTRADA, detalle)
    assert calls.names == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/" + "a" * 300,
        "/" + "b" * 5000,
        "/api/v1/ping/" + "x" * 150,
        "/api/v1/%7Bx%7D%7C%5E%60" + "%41" * 40,
    ],
)
def test_a_long_path_is_shown_as_any_client_value(gateway: EnvoyProcess, path: str) -> None:
    """The path in a 404's detalle is shown by domain/detalle.py's rule (`shown`: at most
    MAX_SHOWN characters, then the ellipsis), which envelope.lua mirrors with the figures
    scripts/gen_edge.py writes into it; a path over 200 characters gets no hint."""
    status, body, _ = raw_request(gateway, "GET", path)
    assert status == 404
    detalle = json.loads(body)["error"]["detalle"]
    # Envoy decodes %41 (an unreserved character) before routing; the others stay escaped.
    seen = path.replace("%41", "A")
    assert detalle.startswith(f"No existe GET {shown(seen, quote=False)}")
    assert len(detalle) <= MAX_DETALLE
    assert ELLIPSIS in detalle


@pytest.mark.parametrize(
    ("raw", "seen"),
    [
        (b"/api/v1/" + "é".encode() * 40, "/api/v1/" + "%C3%A9" * 40),
        (b'/api/v1/a"b\\c\xff', "/api/v1/a%22b/c%FF"),
        (b"/api/v1/\xf0\x9f\x98\x80", "/api/v1/%F0%9F%98%80"),
    ],
)
def test_a_hostile_path_over_h2c_comes_back_escaped_and_bounded(
    gateway: EnvoyProcess, raw: bytes, seen: str
) -> None:
    """HTTP/2 lets any byte into :path; Envoy's normalize_path percent-encodes what is not
    a URL character (and turns a backslash into a slash) before the edge sees it, and
    the detalle shows that as any client value (`shown`)."""
    fields = [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"pos.example"),
        (b":path", raw),
        *((name.encode(), value.encode()) for name, value in KEY_HEADER.items()),
    ]
    answer = h2c_stream(gateway.http_port, fields, [])
    detalle = f"No existe GET {shown(seen, quote=False)}."
    assert answer == json.loads(envelope_bytes(CodigoError.RUTA_NO_ENCONTRADA, detalle))


def test_a_wrong_call_over_h2c_says_the_same(gateway: EnvoyProcess) -> None:
    for method, path, codigo, detalle in [
        (
            "GET",
            "/api/v1/tx",
            CodigoError.METODO_NO_PERMITIDO,
            "/api/v1/tx se llama con POST, no con GET",
        ),
        (
            "GET",
            "/api/v1/pingg",
            CodigoError.RUTA_NO_ENCONTRADA,
            "No existe GET /api/v1/pingg; ¿quiso decir /api/v1/ping?",
        ),
        (
            "GET",
            "/api/v2/ping",
            CodigoError.RUTA_NO_ENCONTRADA,
            "No existe GET /api/v2/ping; ¿quiso decir /api/v1/ping?",
        ),
    ]:
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"http"),
            (b":authority", b"pos.example"),
            (b":path", path.encode()),
            *((name.encode(), value.encode()) for name, value in KEY_HEADER.items()),
        ]
        answer = h2c_stream(gateway.http_port, fields, [])
        assert answer == json.loads(envelope_bytes(codigo, detalle))


def test_body_over_the_limit_is_solicitud_muy_grande(client: httpx.Client) -> None:
    body = json.dumps({"codigos": ["A" * 64] * 20_000}).encode()  # ~1.3 MB
    assert len(body) > 1024 * 1024
    response = client.post(
        "/api/v1/codes", content=body, headers={"content-type": "application/json"}
    )
    fields = assert_envelope(response, CodigoError.SOLICITUD_MUY_GRANDE)
    assert fields["detalle"] == edge_limits.too_large("POST /api/v1/codes")


def test_largest_legitimate_body_passes(client: httpx.Client) -> None:
    body = json.dumps({"promo": 7, "codigos": ["A" * 64] * 5000}).encode()
    response = client.post(
        "/api/v1/codes", content=body, headers={"content-type": "application/json"}
    )
    assert_envelope(response, CodigoError.PROMO_NO_ENCONTRADA)  # reached the server


def test_huge_headers_are_solicitud_muy_grande(client: httpx.Client) -> None:
    response = client.get("/api/v1/ping", headers={"x-relleno": "a" * 100_000})
    fields = assert_envelope(response, CodigoError.SOLICITUD_MUY_GRANDE)
    # Envoy's 431 says it in English ("Request Header Fields Too Large"); the envelope
    # names the limit, in Spanish.
    assert fields["detalle"] == edge_limits.TOO_LARGE_HEADERS


def test_upstream_down_is_servicio_no_disponible(gateway_without_upstream: EnvoyProcess) -> None:
    with httpx.Client(
        base_url=gateway_without_upstream.url, timeout=30, headers=KEY_HEADER
    ) as http:
        response = http.post("/api/v1/ping", json={})
    fields = assert_envelope(response, CodigoError.SERVICIO_NO_DISPONIBLE)
    assert "127.0.0.1" not in fields["detalle"]


# ---------------------------------------------------------------- what must not get through


def raw_get(gateway: EnvoyProcess, path: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """A GET with the path sent exactly as written (httpx would normalise it)."""
    return raw_request(gateway, "GET", path)


@pytest.mark.parametrize(
    ("path", "codigo"),
    [
        ("/api/v1/../loyalty.v1.BackofficeService/ListPrograms", CodigoError.RUTA_NO_ENCONTRADA),
        ("/api/v1/..%2Floyalty.v1.BackofficeService/ListPrograms", CodigoError.SOLICITUD_INVALIDA),
        (
            "/api/v1/%2E%2E/loyalty.v1.BackofficeService/ListPrograms",
            CodigoError.RUTA_NO_ENCONTRADA,
        ),
        (
            "//api/v1//ping/../../loyalty.v1.BackofficeService/ListPrograms",
            CodigoError.RUTA_NO_ENCONTRADA,
        ),
    ],
)
def test_path_tricks_do_not_reach_the_back_office(
    gateway: EnvoyProcess, calls: Calls, path: str, codigo: CodigoError
) -> None:
    before = list(calls.names)
    status, body, headers = raw_get(gateway, path)
    assert status == CATALOGO[codigo].http
    assert json.loads(body)["error"]["codigo"] == codigo.value
    assert dict(headers)["content-type"] == "application/json"
    assert calls.names == before


@pytest.mark.parametrize(
    "method",
    ["/loyalty.v1.BackofficeService/ListPrograms", "/loyalty.v1.PosService/Ping", "/api/v1/ping"],
)
def test_native_grpc_through_envoy_never_reaches_the_server(
    gateway: EnvoyProcess, calls: Calls, method: str
) -> None:
    before = list(calls.names)
    with grpc.insecure_channel(f"127.0.0.1:{gateway.http_port}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=30)
    error = raised.value
    assert isinstance(error, grpc.Call)
    assert error.code() != grpc.StatusCode.OK
    assert calls.names == before


def test_the_back_office_is_served_on_the_grpc_port(grpc_port: int) -> None:
    """Control for the test above: the same call straight to the server works."""
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = backoffice_service_pb2_grpc.BackofficeServiceStub(channel)
        stub.ListPrograms(backoffice_service_pb2.ListProgramsRequest(), timeout=30)


def test_envoy_is_still_running(gateway: EnvoyProcess) -> None:
    assert gateway.poll() is None
    assert "envelope.lua" not in gateway.log_path.read_text(encoding="utf-8", errors="replace")
