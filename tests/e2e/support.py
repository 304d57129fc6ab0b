"""Helpers shared by the e2e tests: the envelope checks of an HTTP answer and a raw h2c
(prior-knowledge HTTP/2) client."""

from __future__ import annotations

import json
import socket
import struct

import httpx

from loyalty_grpc.domain.errors import CATALOGO, CodigoError

TIMEOUT = 10.0
"""Seconds a raw connection waits for Envoy."""


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_clean_headers(response: httpx.Response) -> None:
    assert response.headers["content-type"] == "application/json"
    leaked = [h for h in response.headers if h.startswith(("grpc-", "x-envelope", "x-http"))]
    assert leaked == []


def assert_error(response: httpx.Response, codigo: CodigoError) -> dict[str, str]:
    entrada = CATALOGO[codigo]
    assert response.status_code == entrada.http, response.text
    assert_clean_headers(response)
    assert response.content.startswith(
        b'{"ok":false,"error":{"codigo":"' + codigo.value.encode() + b'","mensaje":'
    )
    body = response.json()
    assert list(body) == ["ok", "error"]
    assert list(body["error"]) == ["codigo", "mensaje", "detalle"]
    assert body["error"]["mensaje"] == entrada.mensaje
    return dict(body["error"])


# ---------------------------------------------------------------- h2c, raw

_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _hpack_int(value: int) -> bytes:
    """An HPACK integer with a 7-bit prefix (string lengths, no Huffman)."""
    if value < 0x7F:
        return bytes([value])
    out, value = [0x7F], value - 0x7F
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes([*out, value])


def _block(fields: list[tuple[bytes, bytes]]) -> bytes:
    """Literal header fields without indexing: the client's HPACK table stays empty."""
    return b"".join(b"\x00" + _hpack_int(len(n)) + n + _hpack_int(len(v)) + v for n, v in fields)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def h2c(
    port: int,
    key: str,
    headers: list[tuple[bytes, bytes]],
    *,
    path: bytes = b"/api/v1/ping",
    body: bytes | None = None,
    trailers: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, object]:
    """One request on a new prior-knowledge HTTP/2 connection to Envoy's HTTP `port`; the
    JSON it answered."""
    fields = [
        (b":method", b"GET" if body is None else b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"pos.example"),
        (b":path", path),
        (b"authorization", b"Bearer " + key.encode()),
        *headers,
    ]
    if body is not None:
        fields.append((b"content-type", b"application/json"))
    return h2c_stream(port, fields, [] if body is None else [body], trailers=trailers)


def h2c_stream(
    port: int,
    fields: list[tuple[bytes, bytes]],
    chunks: list[bytes],
    *,
    end_stream: bool = True,
    trailers: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, object]:
    """A request of exactly these header `fields` (pseudo-headers included) and DATA
    `chunks` (no content-length unless in `fields`) on a new prior-knowledge HTTP/2
    connection; with `end_stream` False the request never ends (the answer must come
    before). The JSON it answered (a reset of the stream after the answer is fine)."""
    ends_with_headers = not chunks and trailers is None and end_stream
    out = (
        _PREFACE
        + _frame(_SETTINGS, 0, 0, b"")
        + _frame(
            _HEADERS, _END_HEADERS | (_END_STREAM if ends_with_headers else 0), 1, _block(fields)
        )
    )
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1 and trailers is None and end_stream
        out += _frame(_DATA, _END_STREAM if last else 0, 1, chunk)
    if trailers is not None:
        out += _frame(_HEADERS, _END_HEADERS | _END_STREAM, 1, _block(trailers))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(out)
        received, answer, done = b"", b"", False
        while not done:
            chunk = sock.recv(65536)
            assert chunk, "Envoy closed the connection"
            received += chunk
            while not done and len(received) >= 9 + int.from_bytes(received[:3]):
                length = int.from_bytes(received[:3])
                kind, flags = received[3], received[4]
                stream = int.from_bytes(received[5:9]) & 0x7FFFFFFF
                payload, received = received[9 : 9 + length], received[9 + length :]
                assert kind not in (_RST_STREAM, _GOAWAY), (kind, payload)
                if kind == _SETTINGS and not flags & _ACK:
                    sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
                if stream == 1 and kind == _DATA:
                    answer += payload
                if stream == 1 and kind in (_DATA, _HEADERS) and flags & _END_STREAM:
                    done = True
    decoded: dict[str, object] = json.loads(answer)
    return decoded
