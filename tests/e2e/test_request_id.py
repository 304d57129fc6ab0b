"""The request id through Envoy: the client gets `x-request-id`, the server's log line for
the call has the same id, and Envoy's access log line for it has neither the query string
(a roster cursor) nor the key. Also Envoy's own series on its admin socket."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loyalty_grpc.api.observability import CALLS_LOGGER, log_context
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.logs import JsonFormatter
from tests.e2e.stack import Stack
from tests.support import free_port

FANS = [
    {
        "id": f"RID{n:04d}",
        "nombre": f"Fan {n}",
        "correo": f"rid{n}@example.com",
        "socio_desde": 2020,
        "temporadas": 1,
        "qr_token": f"qrrid{n}",
        "puntos": 0,
    }
    for n in range(3)
]
# Envoy writes access log lines out every few seconds, not at once.
ACCESS_LOG_WAIT = 20.0


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter(log_context))
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))

    def call(self, request_id: str) -> dict[str, object]:
        [line] = [
            line
            for line in self.lines
            if line["logger"] == CALLS_LOGGER and line["request_id"] == request_id
        ]
        return line


@pytest.fixture(scope="module")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyProcess]:
    """An Envoy of this module's own in front of the stack's server, so that its output
    (the access log) is a file only this module reads."""
    proxy = EnvoyProcess.start_spec(
        gateway_spec(http_port=free_port(), upstreams=(stack.grpc_target,)),
        work_dir=tmp_path_factory.mktemp("envoy-request-id"),
    )
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    return stack.program("reqid", fans=list(FANS))


@pytest.fixture
def captured() -> Iterator[Captured]:
    handler = Captured()
    logger = logging.getLogger("loyalty_grpc")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(saved)


@pytest.fixture
def client(gateway: EnvoyProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        yield http


def access_line(proxy: EnvoyProcess, request_id: str) -> tuple[dict[str, object], str]:
    """Envoy's access log line for the request (waiting for Envoy to flush it)."""
    deadline = time.monotonic() + ACCESS_LOG_WAIT
    while True:
        text = proxy.log_path.read_text(encoding="utf-8", errors="replace")
        for raw in text.splitlines():
            if request_id in raw and raw.startswith("{"):
                return json.loads(raw), raw
        if time.monotonic() > deadline:
            raise AssertionError(f"no access log line for {request_id} in:\n{text[-3000:]}")
        time.sleep(0.2)


def test_ping_has_a_request_id_that_the_server_logged(client, keys, captured):
    response = client.post("/api/v1/ping", headers={"Authorization": f"Bearer {keys['todo']}"})
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    assert uuid.UUID(request_id).version == 4
    line = captured.call(request_id)
    assert (line["method"], line["codigo"], line["programa"]) == (
        "loyalty.v1.PosService/Ping",
        "ok",
        "reqid",
    )
    assert keys["todo"] not in json.dumps(captured.lines)


def test_errors_and_envoy_replies_have_one_too(client, keys, captured):
    response = client.post(
        "/api/v1/fan/resolve",
        json={"fan": "NADIE0000"},
        headers={"Authorization": f"Bearer {keys['todo']}"},
    )
    assert response.status_code == 404
    assert response.json()["error"]["codigo"] == "fan_no_encontrado"
    request_id = response.headers["x-request-id"]
    assert captured.call(request_id)["codigo"] == "fan_no_encontrado"
    # Envoy's own 404 (never reaches the server).
    assert uuid.UUID(client.get("/nada").headers["x-request-id"])


def test_a_client_cannot_choose_the_request_id(client, keys):
    response = client.post(
        "/api/v1/ping",
        headers={"Authorization": f"Bearer {keys['todo']}", "x-request-id": "forged-id"},
    )
    assert response.headers["x-request-id"] != "forged-id"


def test_access_log_has_the_path_without_the_cursor_nor_the_key(gateway, client, keys, captured):
    auth = {"Authorization": f"Bearer {keys['todo']}"}
    first = client.get("/api/v1/roster", params={"limite": "1"}, headers=auth)
    cursor = first.json()["data"]["siguiente"]
    assert cursor
    response = client.get("/api/v1/roster", params={"desde": cursor, "limite": "1"}, headers=auth)
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    assert captured.call(request_id)["method"] == "loyalty.v1.PosService/Roster"

    line, raw = access_line(gateway, request_id)
    assert line["path"] == "/api/v1/roster"
    assert line["method"] == "GET"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], int)
    assert isinstance(line["bytes_sent"], int)
    assert line["bytes_sent"] > 0
    assert str(line["upstream_host"]).endswith(gateway_upstream_port(gateway))
    for secret in (cursor, "desde", "limite", keys["todo"], "Bearer", "RID0001", "@example.com"):
        assert secret not in raw
    # Nor in any other line of the access log.
    log_text = Path(gateway.log_path).read_text(encoding="utf-8", errors="replace")
    assert cursor not in log_text
    assert keys["todo"] not in log_text


def gateway_upstream_port(proxy: EnvoyProcess) -> str:
    text = proxy.config_path.read_text(encoding="utf-8")
    marker = "port_value: "
    return ":" + text.rsplit(marker, 1)[1].split()[0]


def test_envoy_stats_in_prometheus_format(gateway):
    """On the admin socket (the metrics listener serves the same: test_envoy_admin.py)."""
    status, text = gateway.admin.get("/stats/prometheus")
    assert status == 200
    assert "envoy_http_downstream_rq_total" in text
    assert 'envoy_cluster_upstream_rq_total{envoy_cluster_name="loyalty_grpc"}' in text
