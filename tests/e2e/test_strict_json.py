"""The gateway's strict request check (gateway/request_check.lua) through the real Envoy in
front of a recording in-test gRPC server: only RFC 8259 JSON objects whose fields have the
request message's JSON types reach the server, and they reach it unchanged; every refusal
is 400 solicitud_invalida with a one-line Spanish detalle that never repeats the body.

A differential test sends a few hundred mutated bodies and compares the gateway with a
strict reference reader written here on Python's json module. The real stack (nothing
written, the server's own codes for google.protobuf.Value fields): test_strict_bodies.py.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml
from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from loyalty_grpc.api.edge_limits import MAX_DEPTH
from loyalty_grpc.api.native_fields import native_fields, native_of, not_in_json
from loyalty_grpc.api.requests import json_of
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess
from tests.e2e.fake_server import grpc_server, start_gateway

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
SECRET = "ZQX9SECRETO"  # a "Fan ID" that must never come back in a detalle
JSON_HEADERS = {"content-type": "application/json"}
# A well-formed key (the gateway refuses a call without one from its headers; the
# recording server takes any).
KEY_HEADER = {"authorization": "Bearer lp_prueba_" + "K" * 32}


# ---------------------------------------------------------------- the recording server


class Recorder(pb_grpc.PosServiceServicer):
    """Answers every POS method with an empty success and keeps what it received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Message]] = []

    def _keep(self, name: str, request: Message) -> None:
        with self.lock:
            self.calls.append((name, request))

    def Ping(self, request, context):  # noqa: N802
        self._keep("Ping", request)
        return pb.PingResponse(ok=True)

    def PingGet(self, request, context):  # noqa: N802
        self._keep("PingGet", request)
        return pb.PingGetResponse(ok=True)

    def ResolveFan(self, request, context):  # noqa: N802
        self._keep("ResolveFan", request)
        return pb.ResolveFanResponse(ok=True)

    def RegisterTx(self, request, context):  # noqa: N802
        self._keep("RegisterTx", request)
        return pb.RegisterTxResponse(ok=True)

    def Redeem(self, request, context):  # noqa: N802
        self._keep("Redeem", request)
        return pb.RedeemResponse(ok=True)

    def ListPromos(self, request, context):  # noqa: N802
        self._keep("ListPromos", request)
        return pb.ListPromosResponse(ok=True)

    def DepositCodes(self, request, context):  # noqa: N802
        self._keep("DepositCodes", request)
        return pb.DepositCodesResponse(ok=True)

    def Roster(self, request, context):  # noqa: N802
        self._keep("Roster", request)
        return pb.RosterResponse(ok=True)

    def RosterPost(self, request, context):  # noqa: N802
        self._keep("RosterPost", request)
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
    proxy = start_gateway(grpc_port, tmp_path_factory.mktemp("envoy"))
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def client(gateway: EnvoyProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30, headers=KEY_HEADER) as http:
        yield http


def send(
    client: httpx.Client,
    recorder: Recorder,
    path: str,
    body: bytes | str,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[httpx.Response, list[Message]]:
    """The response, and what the server received for it."""
    with recorder.lock:
        before = len(recorder.calls)
    content = body.encode() if isinstance(body, str) else body
    response = client.request(
        method, path, content=content, headers=JSON_HEADERS if headers is None else headers
    )
    with recorder.lock:
        received = [request for _, request in recorder.calls[before:]]
    return response, received


def refused(response: httpx.Response, received: list[Message], body: bytes | str = b"") -> str:
    """The response is the solicitud_invalida envelope, nothing reached the server, and the
    detalle (returned) is one line that repeats nothing of the body."""
    entrada = CATALOGO[CodigoError.SOLICITUD_INVALIDA]
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    envelope = json.loads(response.content, object_pairs_hook=list)
    assert [key for key, _ in envelope] == ["ok", "error"]
    error = dict(envelope[1][1])
    assert list(error) == ["codigo", "mensaje", "detalle"]
    assert (error["codigo"], error["mensaje"]) == ("solicitud_invalida", entrada.mensaje)
    detalle: str = error["detalle"]
    assert detalle
    assert "\n" not in detalle
    assert "\r" not in detalle
    assert len(detalle) < 300
    assert SECRET not in detalle
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    assert not [piece for piece in _pieces(text) if piece in detalle], detalle
    assert received == []
    return detalle


def _pieces(text: str) -> set[str]:
    """The values of a body that must not come back: its quoted texts (5+ characters)."""
    pieces = set()
    for chunk in text.split('"')[1::2]:
        if len(chunk) >= 5 and not chunk.isidentifier():
            pieces.add(chunk)
    return pieces


# ---------------------------------------------------------------- the cases


def test_nested_lists_in_codigos_are_refused(client, recorder):
    for body in ('{"codigos":[["HD-0003"]]}', '{"codigos":[[["hd-0003"]],[]]}'):
        detalle = refused(*send(client, recorder, "/api/v1/redeem", body), body)
        assert detalle == "codigos[0]: debe ser un texto; llegó una lista"


@pytest.mark.parametrize(
    ("body", "detalle"),
    [
        ('{"codigos":["A", 7]}', "codigos[1]: debe ser un texto; llegó un número"),
        ('{"codigos":["A", "B", null]}', "codigos[2]: debe ser un texto; llegó null"),
        ('{"codigos":[true]}', "codigos[0]: debe ser un texto; llegó un booleano"),
        ('{"codigos":[{"c":"A"}]}', "codigos[0]: debe ser un texto; llegó un objeto"),
        ('{"codigos":"HD-1"}', "codigos: debe ser una lista de textos; llegó un texto"),
        ('{"codigos":{"a":"HD-1"}}', "codigos: debe ser una lista de textos; llegó un objeto"),
        ('{"codigo":["HD-1"]}', "codigo: debe ser un texto; llegó una lista"),
        ('{"codigo":"HD-1","terminal":3}', "terminal: debe ser un texto; llegó un número"),
    ],
)
def test_redeem_field_types(client, recorder, body, detalle):
    assert refused(*send(client, recorder, "/api/v1/redeem", body), body) == detalle


def test_trailing_comma_is_refused(client, recorder):
    body = f'{{"id_externo":"x","fan":"{SECRET}","importe":"1",}}'
    detalle = refused(*send(client, recorder, "/api/v1/tx", body), body)
    assert detalle == (
        "cuerpo: JSON no válido en la línea 1, columna 53: sobra una coma antes de cerrar el objeto"
    )


# What protobuf's JSON reader accepted (or read wrongly) that is not JSON, and more.
NOT_JSON: list[tuple[str, str]] = [
    ('{"fan":"A",}', "sobra una coma antes de cerrar el objeto"),
    ('{"codigos":["A",]}', "sobra una coma antes de cerrar la lista"),
    ('{"fan":"A",,"qr":"B"}', "sobra una coma"),
    ('{,"fan":"A"}', "sobra una coma"),
    ("{'fan':'A'}", "los nombres de campo van entre comillas dobles, no simples"),
    ("{\"fan\":'A'}", "los textos van entre comillas dobles, no simples"),
    ('{fan:"A"}', "los nombres de campo van entre comillas dobles"),
    ('{"fan":"A"} // nota', "JSON no admite comentarios"),
    ('/* nota */ {"fan":"A"}', "JSON no admite comentarios"),
    ('{"fan":"A" /* nota */}', "JSON no admite comentarios"),
    ('{"fan": # nota\n"A"}', "JSON no admite comentarios"),
    ('{"importe":NaN}', "NaN e Infinity no son números JSON"),
    ('{"importe":Infinity}', "NaN e Infinity no son números JSON"),
    ('{"importe":-Infinity}', "NaN e Infinity no son números JSON"),
    ('{"importe":012}', "un número no lleva ceros a la izquierda"),
    ('{"importe":-01}', "un número no lleva ceros a la izquierda"),
    ('{"importe":1.}', "un punto decimal necesita dígitos a ambos lados"),
    ('{"importe":.5}', "un número empieza con un dígito"),
    ('{"importe":+5}', "un número no lleva signo +"),
    ('{"importe":1e}', "un exponente necesita dígitos"),
    ('{"importe":0x10}', "un número mal formado"),
    ('{"importe":1.2.3}', "un número mal formado"),
    ('{"importe":1e400}', "un número fuera del rango de un double"),
    ('{"importe":-1e400}', "un número fuera del rango de un double"),
    ('{"importe":' + "9" * 400 + "}", "un número fuera del rango de un double"),
    ('{"importe":True}', "true, false y null van en minúsculas"),
    ('{"importe":nul}', "se esperaba un valor JSON"),
    ('{"importe":}', "falta un valor"),
    ('{"importe":"\\x41"}', "un escape no válido"),
    ('{"importe":"\\u12"}', "un escape \\u necesita 4 dígitos hexadecimales"),
    ('{"fan":"\\ud800"}', "un sustituto UTF-16 alto (\\uD800 a \\uDBFF) sin su pareja baja"),
    ('{"fan":"\\ud800\\u0041"}', "sin su pareja baja"),
    ('{"fan":"\\udc00"}', "un sustituto UTF-16 bajo (\\uDC00 a \\uDFFF) sin su pareja alta"),
    ('{"fan":"a\tb"}', "un carácter de control sin escapar dentro de un texto"),
    ('{"fan":"a\nb"}', "un carácter de control sin escapar dentro de un texto"),
    ('{"fan":"A"', "el cuerpo termina antes de tiempo"),
    ('{"fan":"A', "un texto no se cierra"),
    ('{"fan"}', 'falta ":" entre el nombre de un campo y su valor'),
    ('{"fan" "A"}', 'falta ":" entre el nombre de un campo y su valor'),
    ('{"fan":"A" "qr":"B"}', "se esperaba una coma o } después del valor"),
    ('{"codigos":["A" "B"]}', "se esperaba una coma o ] después del valor"),
    ('{"fan":"A"} x', "hay algo más después del objeto JSON"),
    ('{"fan":"A"}{"fan":"B"}', "hay algo más después del objeto JSON"),
    ('{"fan":"A"}\x00', "hay algo más después del objeto JSON"),
    ('{\x0b"fan":"A"}', "se esperaba el nombre de un campo entre comillas dobles"),
    ('{\x0c"fan":"A"}', "se esperaba el nombre de un campo entre comillas dobles"),
    ('{\u00a0"fan":"A"}', "se esperaba el nombre de un campo entre comillas dobles"),
    ('{"x":' + "[" * 40 + "]" * 40 + "}", f"anidado a más de {MAX_DEPTH} niveles"),
]


@pytest.mark.parametrize(("body", "problem"), NOT_JSON)
def test_what_is_not_json_is_refused(client, recorder, body, problem):
    path = (
        "/api/v1/redeem"
        if "codigos" in body
        else ("/api/v1/tx" if "importe" in body else "/api/v1/fan/resolve")
    )
    detalle = refused(*send(client, recorder, path, body), body)
    assert problem in detalle
    assert "JSON no válido en la línea" in detalle or "anidado" in detalle


DECIMAL_COMMA = '¿un número con coma decimal? va entre comillas ("12,5") o con punto decimal (12.5)'


@pytest.mark.parametrize(
    ("body", "detalle"),
    [
        (
            '{"fan":"DEMO0001","importe":12,5}',
            f"cuerpo: JSON no válido en la línea 1, columna 32: importe: {DECIMAL_COMMA}",
        ),
        (
            '{"importe": 1234,50, "fan":"DEMO0001"}',
            f"cuerpo: JSON no válido en la línea 1, columna 18: importe: {DECIMAL_COMMA}",
        ),
        (
            '{"importeCentavos":12,5}',
            f"cuerpo: JSON no válido en la línea 1, columna 23: importe_centavos: {DECIMAL_COMMA}",
        ),
        # A field the request does not have: its name is the client's, never repeated.
        (
            '{"propina":10,5,"fan":"A"}',
            f"cuerpo: JSON no válido en la línea 1, columna 15: el campo anterior: {DECIMAL_COMMA}",
        ),
        # Not after a number: the name of a field without quotes, as before.
        (
            '{"importe":"12",5}',
            "cuerpo: JSON no válido en la línea 1, columna 17: "
            "los nombres de campo van entre comillas dobles",
        ),
    ],
)
def test_a_decimal_comma_is_named(client, recorder, body, detalle):
    """Issue 23 §3: `"importe":12,5` read as a second member without a name; a digit
    where a field name belongs, right after a number, is a decimal comma."""
    assert refused(*send(client, recorder, "/api/v1/tx", body), body) == detalle


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('{\n  "fan": "añejo",\n  "qr": x\n}', "línea 3, columna 9"),
        ('{"fan": "añejo", "qr": x}', "línea 1, columna 24"),  # characters, not bytes
    ],
)
def test_the_position_names_line_and_column_in_characters(client, recorder, body, where):
    detalle = refused(*send(client, recorder, "/api/v1/fan/resolve", body), body)
    assert detalle.startswith(f"qr: JSON no válido en la {where}: ")


@pytest.mark.parametrize(
    ("body", "detalle"),
    [
        (
            b"\xef\xbb\xbf{}",
            "cuerpo: empieza con una marca de orden de bytes (BOM, U+FEFF); envíe UTF-8 sin ella",
        ),
        (b'{"fan":"\xff"}', "cuerpo: no es UTF-8 válido (byte 9)"),
        (b'{"fan":"\xc0\xaf"}', "cuerpo: no es UTF-8 válido (byte 9)"),  # overlong
        (b'{"fan":"\xed\xa0\x80"}', "cuerpo: no es UTF-8 válido (byte 9)"),  # surrogate
        (b'{"fan":"\xf4\x90\x80\x80"}', "cuerpo: no es UTF-8 válido (byte 9)"),  # > U+10FFFF
        (b'{"fan":"\xe2\x82"}', "cuerpo: no es UTF-8 válido (byte 9)"),  # truncated
        (b"   \r\n", "cuerpo: solo tiene espacios; envíe un objeto JSON o ningún cuerpo"),
        (b"[]", "cuerpo: debe ser un objeto JSON; llegó una lista"),
        (b'"fan"', "cuerpo: debe ser un objeto JSON; llegó un texto"),
        (b"12", "cuerpo: debe ser un objeto JSON; llegó un número"),
        (b"null", "cuerpo: debe ser un objeto JSON; llegó null"),
        (b"true", "cuerpo: debe ser un objeto JSON; llegó un booleano"),
        (
            b"fan=A",
            "cuerpo: JSON no válido en la línea 1, columna 1: se esperaba un valor JSON "
            "(un texto entre comillas dobles, un número, un objeto, una lista, true, "
            "false o null)",
        ),
    ],
)
def test_bodies_that_are_not_one_json_object(client, recorder, body, detalle):
    assert refused(*send(client, recorder, "/api/v1/fan/resolve", body), body) == detalle


@pytest.mark.parametrize(
    ("body", "detalle"),
    [
        ('{"fan":"A","fan":"B"}', "fan: el campo aparece dos veces"),
        (
            '{"fan_id":"A","fanId":"B"}',
            "fan_id: el campo aparece dos veces (como fan_id y como fanId)",
        ),
        ('{"f\\u0061n":"A","fan":"B"}', "fan: el campo aparece dos veces"),
        (
            '{"fan":"A","otro":1,"otro":2}',
            "cuerpo: un nombre se repite en el mismo objeto (línea 1, columna 21)",
        ),
    ],
)
def test_a_key_twice_is_refused(client, recorder, body, detalle):
    assert refused(*send(client, recorder, "/api/v1/fan/resolve", body), body) == detalle


def test_a_key_twice_inside_a_value_field_is_refused(client, recorder):
    body = '{"importe":{"a":1,"a":2}}'
    assert refused(*send(client, recorder, "/api/v1/tx", body), body) == (
        "importe: un nombre se repite en el mismo objeto (línea 1, columna 19)"
    )


@pytest.mark.parametrize(
    ("field", "value", "tipo"),
    [
        ("fan", "12345", "un número"),
        ("fan", "true", "un booleano"),
        ("fan", '["A"]', "una lista"),
        ("fan", '{"id":"A"}', "un objeto"),
        ("fan_id", "1", "un número"),
        ("fanId", "1", "un número"),
        ("qr", "[]", "una lista"),
        ("codigo", "false", "un booleano"),
    ],
)
def test_a_string_field_takes_text_or_null(client, recorder, field, value, tipo):
    body = f'{{"{field}": {value}}}'
    canonical = "fan_id" if field == "fanId" else field
    assert refused(*send(client, recorder, "/api/v1/fan/resolve", body), body) == (
        f"{canonical}: debe ser un texto; llegó {tipo}"
    )


@pytest.mark.parametrize(
    "field", ["id_externo", "id", "tx_id", "fan", "terminal", "caja", "sitio", "sucursal", "moneda"]
)
def test_every_string_field_of_tx_is_checked(client, recorder, field):
    body = f'{{"{field}": 5}}'
    assert refused(*send(client, recorder, "/api/v1/tx", body), body) == (
        f"{field}: debe ser un texto; llegó un número"
    )


def test_null_is_not_sent_and_unknown_fields_are_ignored(client, recorder):
    response, received = send(
        client,
        recorder,
        "/api/v1/fan/resolve",
        '{"fan": null, "qr": "Q1", "otro": [1, {"a": [null, true]}]}',
    )
    assert response.status_code == 200, response.text
    assert received == [pb.ResolveFanRequest(qr="Q1")]


def test_value_fields_reach_the_server_as_sent(client, recorder):
    """google.protobuf.Value fields take any JSON value: the server checks their type
    with the field's own error code (test_strict_bodies.py)."""
    body = (
        '{"importe": [[1], {"a": null}], "ts": {"x": "y"}, "importe_centavos": -0.0, '
        '"centavos": 1E+2, "amount_cents": 12345678901234567890}'
    )
    response, received = send(client, recorder, "/api/v1/tx", body)
    assert response.status_code == 200, response.text
    (request,) = received
    assert isinstance(request, pb.RegisterTxRequest)
    assert json_of(request.importe) == [[1.0], {"a": None}]
    assert json_of(request.ts) == {"x": "y"}
    assert json_of(request.centavos) == 100.0
    assert json_of(request.amount_cents) == 12345678901234567890.0
    zero = json_of(request.importe_centavos)
    assert isinstance(zero, float)
    assert (zero, math.copysign(1, zero)) == (0, -1)


def test_escapes_reach_the_server_decoded(client, recorder):
    body = '{"fan": "a\\/b\\u00e9\\ud83d\\ude00\\n\\"\\\\", "qr": "\u00f1\U0001f600"}'
    response, received = send(client, recorder, "/api/v1/fan/resolve", body)
    assert response.status_code == 200, response.text
    assert received == [pb.ResolveFanRequest(fan='a/bé😀\n"\\', qr="ñ😀")]


# ---------------------------------------------------------------- headers, URL, method


@pytest.mark.parametrize(
    ("headers", "detalle"),
    [
        ({}, "Content-Type: falta; un cuerpo JSON se envía con Content-Type: application/json"),
        ({"content-type": "text/plain"}, "Content-Type: debe ser application/json"),
        (
            {"content-type": "application/x-www-form-urlencoded"},
            "Content-Type: debe ser application/json",
        ),
        (
            {"content-type": "application/json-patch+json"},
            "Content-Type: debe ser application/json",
        ),
        (
            {"content-type": "application/json; charset=latin-1"},
            "Content-Type: el JSON va en UTF-8 (charset=utf-8, o sin charset)",
        ),
        (
            {"content-type": "application/json", "content-encoding": "gzip"},
            "Content-Encoding: no se admite; envíe el cuerpo sin comprimir",
        ),
    ],
)
def test_a_body_must_be_labelled_json(client, recorder, headers, detalle):
    body = f'{{"fan": "{SECRET}"}}'
    response, received = send(client, recorder, "/api/v1/fan/resolve", body, headers=headers)
    assert refused(response, received, body) == detalle


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        'application/json;charset="UTF-8"',
        "application/json; odata=verbose",
    ],
)
def test_json_content_types_accepted(client, recorder, content_type):
    response, received = send(
        client,
        recorder,
        "/api/v1/fan/resolve",
        '{"fan":"A"}',
        headers={"content-type": content_type},
    )
    assert response.status_code == 200, response.text
    assert received == [pb.ResolveFanRequest(fan="A")]


def test_no_body_needs_no_content_type(client, recorder):
    for headers in ({}, {"content-type": "text/plain"}):
        response, received = send(client, recorder, "/api/v1/ping", b"", headers=headers)
        assert response.status_code == 200, response.text
        assert received == [pb.PingRequest()]


@pytest.mark.parametrize("path", ["/api/v1/ping", "/api/v1/promos", "/api/v1/roster"])
def test_a_get_takes_no_body(client, recorder, path):
    body = '{"limite": "7"}'
    response, received = send(client, recorder, path, body, method="GET")
    assert refused(response, received, body) == (
        f"GET {path}: no lleva cuerpo; sus parámetros van en la URL"
    )


@pytest.mark.parametrize(
    ("target", "detalle"),
    [
        ("/api/v1/tx?fan=A", "fan: va en el cuerpo JSON, no en la URL"),
        ("/api/v1/tx?otro=1&importe=5", "importe: va en el cuerpo JSON, no en la URL"),
        ("/api/v1/tx?fanId=A", "fan_id: va en el cuerpo JSON, no en la URL"),
        ("/api/v1/tx?f%61n=A", "fan: va en el cuerpo JSON, no en la URL"),
        ("/api/v1/redeem?codigos=A&codigos=B", "codigos: va en el cuerpo JSON, no en la URL"),
    ],
)
def test_body_fields_never_come_from_the_url(client, recorder, target, detalle):
    response, received = send(client, recorder, target, '{"id_externo": "a"}')
    assert refused(response, received) == detalle


# The request messages that have fields for native gRPC callers only, by their path.
NATIVE_PATHS: dict[Descriptor, str] = {
    pb.RegisterTxRequest.DESCRIPTOR: "/api/v1/tx",
    pb.RedeemRequest.DESCRIPTOR: "/api/v1/redeem",
    pb.DepositCodesRequest.DESCRIPTOR: "/api/v1/codes",
    pb.RosterPostRequest.DESCRIPTOR: "/api/v1/roster",
}
NATIVE_CASES = [
    (path, name, not_in_json(field.name, json_name))
    for message, path in NATIVE_PATHS.items()
    for field in native_fields(message)
    if (json_name := native_of(field)) is not None
    for name in sorted({field.name, field.json_name})
]


def test_native_paths_cover_every_request_with_native_fields():
    with_native = {
        name
        for name, message in pb.DESCRIPTOR.message_types_by_name.items()
        if name.endswith("Request") and native_fields(message)
    }
    assert with_native == {message.name for message in NATIVE_PATHS}


@pytest.mark.parametrize(("path", "name", "detalle"), NATIVE_CASES)
def test_native_only_fields_are_refused_in_json(client, recorder, path, name, detalle):
    """A field for native gRPC callers only does not exist in the JSON API: in the body
    (any value, null too) or the URL it is refused, naming the JSON field to send."""
    for value in ("1", "null", '["A"]', '{"seconds": 1}'):
        body = f'{{"{name}": {value}}}'
        assert refused(*send(client, recorder, path, body), body) == detalle
    assert refused(*send(client, recorder, f"{path}?{name}=1", "{}")) == detalle


def test_unknown_query_parameters_of_a_post_are_ignored(client, recorder):
    response, received = send(client, recorder, "/api/v1/fan/resolve?v=2&x", '{"fan":"A"}')
    assert response.status_code == 200, response.text
    assert received == [pb.ResolveFanRequest(fan="A")]


@pytest.mark.parametrize(
    ("query", "detalle"),
    [
        ("desde=a&desde=b", "desde: el parámetro aparece dos veces en la URL"),
        ("limite=1&limite=2", "limite: el parámetro aparece dos veces en la URL"),
        ("limite=%ff", "limite: no es UTF-8 válido"),
        ("desde=%C3%28", "desde: no es UTF-8 válido"),
        (
            "limite=5%",
            "URL: un escape % mal formado en los parámetros (se escribe %XX, dos "
            "dígitos hexadecimales)",
        ),
        (
            "otro=%zz",
            "URL: un escape % mal formado en los parámetros (se escribe %XX, dos "
            "dígitos hexadecimales)",
        ),
    ],
)
def test_get_parameters(client, recorder, query, detalle):
    response, received = send(
        client, recorder, f"/api/v1/roster?{query}", b"", method="GET", headers={}
    )
    assert refused(response, received) == detalle


def test_get_parameters_accepted(client, recorder):
    response, received = send(
        client, recorder, "/api/v1/roster?desde=c%C3%BA&limite=5&x=1", b"", method="GET", headers={}
    )
    assert response.status_code == 200, response.text
    assert received == [pb.RosterRequest(desde="cú", limite="5")]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/redeem/",
        "/api/v1/redeem//",
        "/api/v1/./redeem",
        "/api/v1/re%64eem",
        "/api/v1/redeem?",
    ],
)
def test_path_variants_the_transcoder_maps_are_checked(client, recorder, path):
    body = '{"codigos":[["HD-1"]]}'
    assert refused(*send(client, recorder, path, body), body) == (
        "codigos[0]: debe ser un texto; llegó una lista"
    )


def test_an_unknown_path_is_answered_from_its_headers(client, recorder):
    """envelope.lua answers 404 before any body is read (the check never runs)."""
    for body in ('{"x": 1,}', '{"x": 1}'):
        response, received = send(client, recorder, "/api/v1/nope", body)
        assert response.status_code == 404
        assert response.json()["error"]["detalle"] == "No existe POST /api/v1/nope."
        assert received == []


def test_largest_legitimate_body_passes(client, recorder):
    body = json.dumps({"promo": 7, "codigos": ["A" * 64] * 5000})
    response, received = send(client, recorder, "/api/v1/codes", body)
    assert response.status_code == 200, response.text
    (request,) = received
    assert isinstance(request, pb.DepositCodesRequest)
    assert json_of(request.codigos) == ["A" * 64] * 5000


# ---------------------------------------------------------------- differential test


class _RefusedError(Exception):
    pass


class _Object(dict[str, Any]):
    """A JSON object that remembers its keys in order (duplicates are refused)."""

    order: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Object:
    keys = [key for key, _ in items]
    if len(set(keys)) != len(keys):
        raise _RefusedError("duplicate")
    obj = _Object(items)
    obj.order = keys
    return obj


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _RefusedError("range")
    return value


def _constant(name: str) -> None:
    raise _RefusedError(name)


def _check_tree(value: Any, depth: int) -> None:
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise _RefusedError("surrogate")
    elif isinstance(value, list | dict):
        if depth > MAX_DEPTH:
            raise _RefusedError("depth")
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            _check_tree(key, depth)
            _check_tree(child, depth + 1)


def _kinds(request: type[Message]) -> dict[str, tuple[str, str]]:
    """Each JSON name of the message's fields -> (proto name, kind), from the descriptor."""
    kinds: dict[str, tuple[str, str]] = {}
    native = {field.name for field in native_fields(cast("Descriptor", request.DESCRIPTOR))}
    for field in request.DESCRIPTOR.fields:
        if field.name in native:
            kind = "n"  # for native gRPC callers only: refused in JSON
        elif field.type == FieldDescriptor.TYPE_STRING:
            kind = "S" if field.is_repeated else "s"
        else:
            assert field.message_type is not None
            assert field.message_type.full_name == "google.protobuf.Value"
            kind = "v"
        kinds[field.name] = kinds[field.json_name] = (field.name, kind)
    return kinds


def reference(body: bytes, request: type[Message]) -> dict[str, Any]:
    """The strict reading of a body for `request`: {proto name: JSON value} of the fields
    sent (null = not sent), or _RefusedError."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _RefusedError("utf-8") from None
    if text.startswith("\ufeff"):
        raise _RefusedError("bom")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_float=_number,
            parse_int=_number,
            parse_constant=_constant,
        )
    except (json.JSONDecodeError, RecursionError):
        raise _RefusedError("syntax") from None
    if not isinstance(value, _Object):
        raise _RefusedError("not an object")
    _check_tree(value, 1)
    kinds = _kinds(request)
    fields: dict[str, Any] = {}
    seen: set[str] = set()
    for key in value.order:
        if key not in kinds:
            continue
        name, kind = kinds[key]
        if kind == "n":
            raise _RefusedError("native only")
        if name in seen:
            raise _RefusedError("alias twice")
        seen.add(name)
        item = value[key]
        if kind == "v":
            fields[name] = item  # JSON null too: a Value holding null_value
            continue
        if item is None:
            continue
        if kind == "s" and not isinstance(item, str):
            raise _RefusedError("type")
        if kind == "S" and not (isinstance(item, list) and all(isinstance(x, str) for x in item)):
            raise _RefusedError("type")
        if item:  # proto3: "" and [] are not sent
            fields[name] = item
    return fields


def as_received(request: Message) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for field, value in request.ListFields():
        if isinstance(value, struct_pb2.Value):
            fields[field.name] = json_of(value)
        elif field.is_repeated:
            fields[field.name] = list(value)
        else:
            fields[field.name] = value
    return fields


SEEDS: list[tuple[str, type[Message], str]] = [
    (
        "/api/v1/fan/resolve",
        pb.ResolveFanRequest,
        f'{{"fan": "{SECRET}", "qr": null, "otro": [1, -2.5e3, {{"a": true}}, "\\u00e9"]}}',
    ),
    (
        "/api/v1/tx",
        pb.RegisterTxRequest,
        f'{{"id_externo": "V-1", "fan": "{SECRET}", "importe": "1,234.50", '
        '"importe_centavos": 123450, "ts": 1795295812000, "terminal": "Caja 3"}',
    ),
    (
        "/api/v1/redeem",
        pb.RedeemRequest,
        '{"codigos": ["HD-0001", "hd-0002", "\\ud83d\\ude00"], "caja": "C1", "ts": "2026-01-01"}',
    ),
    (
        "/api/v1/codes",
        pb.DepositCodesRequest,
        '{"promo": 7, "codes": [["A"], "B"], "codigos": "A1, A2"}',
    ),
]
# How many mutated bodies the differential test sends, from which seed (a longer run:
# STRICT_JSON_MUTATIONS=20000 STRICT_JSON_SEED=7 pytest -k agrees tests/e2e/test_strict_json.py).
MUTATIONS = int(os.environ.get("STRICT_JSON_MUTATIONS", "600"))
MUTATION_SEED = int(os.environ.get("STRICT_JSON_SEED", "20261124"))
# Bytes the mutations insert or substitute: JSON's structure, and what it does not allow.
INSERTS = [
    b",",
    b"]",
    b"}",
    b"[",
    b"{",
    b'"',
    b"'",
    b"\\",
    b":",
    b" ",
    b"\t",
    b"\n",
    b"\x0b",
    b"/",
    b"*",
    b"0",
    b"-",
    b".",
    b"e",
    b"+",
    b"N",
    b"x",
    b"\x00",
    b"\x1f",
    "\u00a0".encode(),
    b"\xff",
    b"\xed\xa0\x80",
    b"\\u",
    b"\\ud800",
    b"null",
    b"true",
    b"[[",
    b'"fan":"A",',
    b'"codigos":',
    b"1e999",
]


def mutations(count: int) -> Iterator[tuple[str, type[Message], bytes]]:
    rng = random.Random(MUTATION_SEED)
    for _ in range(count):
        path, request, seed = rng.choice(SEEDS)
        body = bytearray(seed.encode())
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            at = rng.randrange(len(body) + 1)
            action = rng.random()
            if action < 0.4:
                body[at:at] = rng.choice(INSERTS)
            elif action < 0.7:
                body[at : at + 1] = b""
            else:
                body[at : at + 1] = rng.choice(INSERTS)
        yield path, request, bytes(body)


def test_gateway_agrees_with_a_strict_json_reader(client, recorder):
    accepted = refused_count = 0
    for path, request, body in mutations(MUTATIONS):
        try:
            expected = reference(body, request)
        except _RefusedError:
            expected = None
        response, received = send(client, recorder, path, body)
        if expected is None:
            refused(response, received)
            refused_count += 1
            continue
        assert response.status_code == 200, (body, response.text)
        (got,) = received
        assert as_received(got) == expected, body
        accepted += 1
    # Both sides were exercised.
    assert accepted > 50, accepted
    assert refused_count > 300, refused_count


# ---------------------------------------------------------------- without the check


def gateway_copy(tmp: Path, change: str) -> Path:
    copy = Path(shutil.copytree(GATEWAY, tmp / "gateway"))
    config = yaml.safe_load((copy / "envoy.yaml").read_text(encoding="utf-8"))
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"
    ]
    filters = manager["http_filters"]
    (check,) = [
        f
        for f in filters
        if f["typed_config"]
        .get("default_source_code", {})
        .get("filename", "")
        .endswith("request_check.lua")
    ]
    if change == "without":
        filters.remove(check)
    else:  # a bug in the check
        lua = (copy / "request_check.lua").read_text(encoding="utf-8")
        broken = lua.replace(
            "local function check(handle)\n",
            'local function check(handle)\n  error("fallo de prueba")\n',
        )
        assert broken != lua
        (copy / "request_check.lua").write_text(broken, encoding="utf-8")
    (copy / "envoy.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def unchecked(grpc_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The gateway without request_check.lua: what the transcoder's own refusals become."""
    tmp = tmp_path_factory.mktemp("unchecked")
    proxy = start_gateway(grpc_port, tmp / "work", gateway_copy(tmp, "without"))
    with httpx.Client(base_url=proxy.url, timeout=30, headers=KEY_HEADER) as http:
        yield http
    proxy.stop()


@pytest.mark.parametrize(
    ("path", "body", "detalle"),
    [
        (
            "/api/v1/fan/resolve",
            f'{{"fan": {SECRET}}}',
            "cuerpo: no es JSON válido o no es una solicitud de esta operación",
        ),
        ("/api/v1/fan/resolve", '{"fan": 12345}', "fan: debe ser un texto"),
        ("/api/v1/redeem", '{"codigos": ["A", true]}', "codigos: cada elemento debe ser un texto"),
        ("/api/v1/fan/resolve", f'{{"fan": {{"id": "{SECRET}"}}}}', "fan: no admite un objeto"),
        (
            "/api/v1/fan/resolve",
            f'{{"fan": ["{SECRET}"]}}',
            "cuerpo: un campo de un solo valor recibió una lista",
        ),
        ("/api/v1/fan/resolve", "[]", "cuerpo: debe ser un objeto JSON"),
        (
            "/api/v1/fan/resolve",
            f'{{"fan": "{SECRET}"}} x',
            "cuerpo: no es JSON válido o no es una solicitud de esta operación",
        ),
        (
            "/api/v1/fan/resolve",
            f'{{"fan": "\\ud800{SECRET}"}}',
            "cuerpo: no es JSON válido o no es una solicitud de esta operación",
        ),
    ],
)
def test_the_transcoders_refusals_never_show_its_text(unchecked, recorder, path, body, detalle):
    response, received = send(unchecked, recorder, path, body)
    assert refused(response, received, body) == detalle


@pytest.fixture(scope="module")
def broken(
    grpc_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, EnvoyProcess]]:
    tmp = tmp_path_factory.mktemp("broken")
    proxy = start_gateway(grpc_port, tmp / "work", gateway_copy(tmp, "broken"))
    with httpx.Client(base_url=proxy.url, timeout=30, headers=KEY_HEADER) as http:
        yield http, proxy
    proxy.stop()


def test_a_bug_in_the_check_fails_closed(broken, recorder):
    client, proxy = broken
    response, received = send(client, recorder, "/api/v1/fan/resolve", '{"fan": "A"}')
    assert response.status_code == 500
    assert response.json()["error"]["codigo"] == "error_interno"
    assert received == []
    assert "request_check.lua: " in proxy.log_path.read_text(encoding="utf-8")


def test_envoy_logged_no_lua_error(gateway):
    assert gateway.poll() is None
    log = gateway.log_path.read_text(encoding="utf-8", errors="replace")
    assert "request_check.lua" not in log
    assert "envelope.lua" not in log
