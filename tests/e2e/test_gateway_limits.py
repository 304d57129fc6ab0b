"""Attacks on the gateway's limits (issue 22 §3), against a real Envoy on loopback, each
bounded: a body trickled a byte at a time is cut by the whole-request deadline, a stalled
one by the stream idle timeout, an idle connection is closed; HTTP/2 offers at most 100
streams and windows of at most 1 MiB, and a client opening more streams loses its
connection; with a small heap budget Envoy answers new requests with the 503 envelope,
refuses connections, and resets the streams of a client that does not read, and keeps
serving.

The timeouts are shortened in a copy of the gateway folder (the shipped values are checked
by tests/unit/test_gateway_limits.py); no server is needed behind Envoy: nothing here is
forwarded. Which limit acted is read from Envoy's stats, not from clocks.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from tests.e2e.h2_client import INTERNAL_ERROR, MAX_CONCURRENT_STREAMS, H2Connection
from tests.e2e.stack import Stack
from tests.e2e.support import assert_error
from tests.gateway_specs import GATEWAY, gateway_copy, hcm
from tests.support import free_port

MiB = 1024 * 1024
# The rendered copy's timeouts (s): a trickle every TRICKLE keeps the stream from idling
# (IDLE), so only the whole-request DEADLINE can end it; a stalled body idles out first.
DEADLINE, IDLE, CONNECTION_IDLE, TRICKLE = 4, 2, 1, 0.5
BOUND = 20.0  # no attack here lasts longer
# The shape of a live key (never a valid one: no server is behind this Envoy).
KEY = b"lp_vivo_" + b"a1B2c3D4" * 4
BODY_HEADERS = [
    (b"authorization", b"Bearer " + KEY),
    (b"content-type", b"application/json"),
    (b"content-length", b"1000"),
]
OVERLOAD_DETALLE = "memoria"  # what the overload envelope's detalle says (envoy.yaml)


def shipped() -> dict[str, Any]:
    return envoy_config.load_config(GATEWAY)


def start_gateway(tmp: Path, gateway_dir: Path | None = None, **options: Any) -> EnvoyProcess:
    spec = gateway_spec(
        http_port=free_port(),
        upstreams=(f"127.0.0.1:{free_port()}",),  # nobody there: nothing is forwarded
        gateway_dir=gateway_dir,
        **options,
    )
    return EnvoyProcess.start_spec(spec, work_dir=tmp / "envoy")


def edited_gateway(tmp: Path, change: Any) -> Path:
    folder = gateway_copy(tmp)
    config = envoy_config.load_config(folder)
    change(config)
    (folder / "envoy.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


def stats(proxy: EnvoyProcess, prefix: str) -> dict[str, int]:
    """Envoy's counters and gauges under `prefix` (histograms left out)."""
    admin = proxy.admin
    status, text = admin.get(f"/stats?filter=^{prefix}")
    assert status == 200
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            found[name] = int(value)
    return found


def stat(proxy: EnvoyProcess, name: str) -> int:
    return stats(proxy, name).get(name, 0)


def until(condition: Callable[[], bool]) -> bool:
    """Poll `condition` (Envoy's stats) for at most BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def http1_response(raw: bytes) -> httpx.Response:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = [(name, value) for name, _, value in (line.partition(": ") for line in lines)]
    return httpx.Response(int(status_line.split()[1]), headers=headers, content=body)


def complete(raw: bytes) -> bool:
    head, separator, body = raw.partition(b"\r\n\r\n")
    if not separator:
        return False
    for line in head.decode("latin-1").lower().split("\r\n"):
        if line.startswith("content-length:"):
            return len(body) >= int(line.split(":")[1])
    return False


def http1_slow_body(port: int, *, trickle: bool) -> tuple[httpx.Response, bool]:
    """POST a 1000-byte body a byte every TRICKLE seconds (`trickle`), or one byte and then
    nothing; Envoy's answer, and whether it closed the connection after it."""
    head = b"POST /api/v1/tx HTTP/1.1\r\nHost: pos.example\r\n"
    head += b"".join(name + b": " + value + b"\r\n" for name, value in BODY_HEADERS) + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock:
        sock.sendall(head + b"{")
        sock.settimeout(TRICKLE)
        raw, deadline = b"", time.monotonic() + BOUND
        while not complete(raw) and time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if trickle:
                    sock.sendall(b" ")
                continue
            assert chunk, f"closed without an answer after {raw!r}"
            raw += chunk
        assert complete(raw), raw
        sock.settimeout(BOUND)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
    return http1_response(raw), closed


def h2_slow_body(port: int, *, trickle: bool) -> dict[str, object]:
    """The same over HTTP/2: the envelope Envoy answered."""
    with H2Connection(port) as connection:
        stream = connection.request(b"/api/v1/tx", headers=BODY_HEADERS)
        connection.send(stream, b"{")
        deadline = time.monotonic() + BOUND
        while not connection.wait(lambda: stream in connection.ended, TRICKLE):
            assert time.monotonic() < deadline
            assert stream not in connection.resets
            if trickle:
                connection.send(stream, b" ")
        return connection.answer(stream)


def assert_tiempo_agotado(envelope: dict[str, Any]) -> None:
    assert list(envelope) == ["ok", "error"]
    assert envelope["ok"] is False
    error = envelope["error"]
    assert error["codigo"] == CodigoError.TIEMPO_AGOTADO.value
    assert "a tiempo" in error["detalle"]


# ---------------------------------------------------------------- slow and idle requests


@pytest.fixture(scope="module")
def slow_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    tmp = tmp_path_factory.mktemp("slow")

    def shorten(config: dict[str, Any]) -> None:
        manager = hcm(config)
        manager["request_timeout"] = f"{DEADLINE}s"
        manager["stream_idle_timeout"] = f"{IDLE}s"
        manager["common_http_protocol_options"]["idle_timeout"] = f"{CONNECTION_IDLE}s"

    with start_gateway(tmp, edited_gateway(tmp, shorten)) as proxy:
        yield proxy


COUNTERS = "http.pos_http.downstream_"


def test_a_trickled_body_is_cut_by_the_whole_request_deadline(slow_gateway: EnvoyProcess):
    before = stats(slow_gateway, COUNTERS)
    response, closed = http1_slow_body(slow_gateway.http_port, trickle=True)
    error = assert_error(response, CodigoError.TIEMPO_AGOTADO)
    assert "a tiempo" in error["detalle"]
    assert closed  # the connection goes with it
    assert_tiempo_agotado(h2_slow_body(slow_gateway.http_port, trickle=True))
    after = stats(slow_gateway, COUNTERS)
    # Both cut by request_timeout, neither by the stream idle timeout.
    assert after[f"{COUNTERS}rq_timeout"] - before.get(f"{COUNTERS}rq_timeout", 0) == 2
    assert after.get(f"{COUNTERS}rq_idle_timeout", 0) == before.get(f"{COUNTERS}rq_idle_timeout", 0)


def test_a_stalled_body_is_cut_by_the_stream_idle_timeout(slow_gateway: EnvoyProcess):
    before = stats(slow_gateway, COUNTERS)
    response, _ = http1_slow_body(slow_gateway.http_port, trickle=False)
    assert_error(response, CodigoError.TIEMPO_AGOTADO)
    assert_tiempo_agotado(h2_slow_body(slow_gateway.http_port, trickle=False))
    after = stats(slow_gateway, COUNTERS)
    assert after[f"{COUNTERS}rq_idle_timeout"] - before.get(f"{COUNTERS}rq_idle_timeout", 0) == 2
    assert after.get(f"{COUNTERS}rq_timeout", 0) == before.get(f"{COUNTERS}rq_timeout", 0)


def test_an_idle_connection_is_closed(slow_gateway: EnvoyProcess):
    before = stat(slow_gateway, f"{COUNTERS}cx_idle_timeout")
    with socket.create_connection(("127.0.0.1", slow_gateway.http_port), timeout=BOUND) as sock:
        assert sock.recv(1) == b""  # never used: closed at once
    with H2Connection(slow_gateway.http_port) as connection:
        # HTTP/2: told to go away (NO_ERROR), then closed once drained.
        assert connection.wait(lambda: connection.goaway is not None, BOUND)
        assert connection.goaway == 0
    assert stat(slow_gateway, f"{COUNTERS}cx_idle_timeout") - before == 2


def test_a_request_sent_at_once_is_not_hurt(slow_gateway: EnvoyProcess):
    with httpx.Client(base_url=slow_gateway.url, timeout=BOUND) as client:
        assert client.get("/api/v1/openapi.json").status_code == 200


# ---------------------------------------------------------------- HTTP/2


def test_http2_offers_at_most_100_streams_and_windows_of_1_mib(stack: Stack):
    h2 = hcm(shipped())["http2_protocol_options"]
    with H2Connection(stack.envoy_port) as connection:
        assert connection.wait(lambda: connection.connection_updates > 0)
        assert connection.settings[MAX_CONCURRENT_STREAMS] == h2["max_concurrent_streams"] <= 100
        assert connection.initial_window == h2["initial_stream_window_size"] <= MiB
        window = connection.connection_window
        assert window == h2["initial_connection_window_size"] <= MiB


def test_a_client_opening_more_streams_than_offered_loses_the_connection(stack: Stack):
    with H2Connection(stack.envoy_port) as connection:
        limit = connection.settings[MAX_CONCURRENT_STREAMS]
        for _ in range(limit):  # unfinished bodies: nothing reaches the server
            connection.request(b"/api/v1/tx", headers=BODY_HEADERS)
        assert not connection.wait(lambda: bool(connection.resets), 1.0)
        assert not connection.closed
        connection.request(b"/api/v1/tx", headers=BODY_HEADERS)
        assert connection.wait(lambda: connection.closed, BOUND)
    with httpx.Client(base_url=stack.base_url, timeout=BOUND) as client:
        assert client.get("/api/v1/openapi.json").status_code == 200  # nobody else hurt


# ---------------------------------------------------------------- Envoy's memory

# Below what Envoy holds idle (about 13 MiB): the heap is over budget from the start.
TINY_BUDGET = 8 * MiB
HEAP = "overload.envoy.resource_monitors.fixed_heap.pressure"


def test_over_its_heap_budget_envoy_refuses_new_connections(tmp_path: Path):
    with start_gateway(tmp_path, max_heap_bytes=TINY_BUDGET) as proxy:
        assert until(lambda: stat(proxy, HEAP) >= 98)  # read every 0.25 s
        with socket.create_connection(("127.0.0.1", proxy.http_port), timeout=BOUND) as sock:
            try:
                sock.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = sock.recv(65536)
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
        assert answer == b""  # closed without a word; the client retries
        shed = "overload.envoy.load_shed_points.tcp_listener_accept.shed_load_count"
        assert stat(proxy, shed) >= 1
        assert proxy.poll() is None  # Envoy itself runs on, its admin interface answers


def test_over_95_percent_envoy_answers_new_requests_with_the_503_envelope(tmp_path: Path):
    """The load shed point of 98 % taken out, so that the budget under Envoy's idle heap
    leaves it refusing requests rather than connections."""

    def without_load_shedding(config: dict[str, Any]) -> None:
        del config["overload_manager"]["loadshed_points"]

    folder = edited_gateway(tmp_path, without_load_shedding)
    with start_gateway(tmp_path, folder, max_heap_bytes=TINY_BUDGET) as proxy:
        active = "overload.envoy.overload_actions.stop_accepting_requests.active"
        assert until(lambda: stat(proxy, active) == 1)
        with httpx.Client(base_url=proxy.url, timeout=BOUND) as client:
            for method, path in (("GET", "/api/v1/openapi.json"), ("POST", "/api/v1/tx")):
                response = client.request(method, path, json={"fan": "x"})
                error = assert_error(response, CodigoError.SERVICIO_NO_DISPONIBLE)
                assert OVERLOAD_DETALLE in error["detalle"]
        with H2Connection(proxy.http_port) as connection:
            stream = connection.request(b"/api/v1/ping", method=b"GET", end=True)
            envelope = connection.answer(stream)
            assert envelope["error"]["codigo"] == CodigoError.SERVICIO_NO_DISPONIBLE.value  # type: ignore[index]
        assert stat(proxy, "http.pos_http.downstream_rq_overload_close") == 3
        assert proxy.poll() is None


ATTACK_BUDGET = 48 * MiB
ATTACK_CONNECTIONS = 8  # x 100 streams x the OpenAPI document (~100 KB): 80 MB offered


def slow_reader(port: int) -> H2Connection | None:
    """A connection that grants no window and asks for the OpenAPI document (no key
    needed) on every stream it may open; returned once Envoy answered or reset each
    (None: Envoy refused the connection)."""
    try:
        connection = H2Connection(port, initial_window=0)
    except (AssertionError, OSError):
        return None
    streams = {
        connection.request(b"/api/v1/openapi.json", method=b"GET", end=True)
        for _ in range(connection.settings[MAX_CONCURRENT_STREAMS])
    }

    def all_answered() -> bool:
        return connection.closed or streams <= connection.headers | set(connection.resets)

    connection.wait(all_answered)
    return connection


def test_a_client_that_does_not_read_has_its_streams_reset_and_envoy_serves_on(tmp_path: Path):
    """Envoy holds each answer the client does not read. Past 90 % of the budget it
    resets the biggest streams; the heap comes back once the client is gone, and Envoy
    answers again."""
    resets = "envoy.overload_actions.reset_high_memory_stream.count"
    with start_gateway(tmp_path, max_heap_bytes=ATTACK_BUDGET) as proxy:
        attackers: list[H2Connection] = []
        try:
            for _ in range(ATTACK_CONNECTIONS):
                connection = slow_reader(proxy.http_port)
                if connection is None:
                    break  # refused: past 98 %
                attackers.append(connection)
                if stat(proxy, resets) > 0:
                    break
            assert until(lambda: stat(proxy, resets) > 0)
            for connection in attackers:
                connection.wait(lambda: False, 0.2)  # the RST_STREAM frames still in flight
            codes = {code for connection in attackers for code in connection.resets.values()}
            assert codes == {INTERNAL_ERROR}
            assert proxy.poll() is None
        finally:
            for connection in attackers:
                connection.close()
        assert until(lambda: stat(proxy, HEAP) < 90)
        with httpx.Client(base_url=proxy.url, timeout=BOUND) as client:
            document = client.get("/api/v1/openapi.json")
        assert document.status_code == 200
        assert json.loads(document.content)["openapi"]
