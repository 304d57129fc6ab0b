"""Issue 24 §5: a route an operator adds to the gateway needs the transcoder and the Lua
filters disabled on it (docs/gateway.md "Routes of your own"). The route and the cluster
are taken from that page as written, added to a copy of the gateway folder, and a real
Envoy runs it in front of the stack's server and an HTTP server of the test's own: Envoy
accepts them, the route reaches that server untouched (no transcoding, no envelope, no
strict JSON check), the API still answers beside it; without the per-route config the
rendering refuses the route (envelope.lua would answer it 404)."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from loyalty_grpc.runtime.gateway.config import find_gateway_dir
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.gateway.shape import EnvoyError
from tests.e2e.stack import Stack
from tests.e2e.test_gateway_reload import edit_config, routes
from tests.support import free_port

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
SECTION = "### Routes of your own"
# What the operator's server sends back: not JSON, not the envelope.
ANSWER = "estado: ok\n"


def documented_blocks() -> tuple[dict[str, Any], dict[str, Any]]:
    """The route and the cluster of the docs' section, as YAML (each a one-item list)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2, blocks
    [route] = yaml.safe_load(blocks[0])
    [cluster] = yaml.safe_load(blocks[1])
    return route, cluster


class Echo(BaseHTTPRequestHandler):
    """The operator's HTTP server: says what it received in its headers, answers text."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("x-seen", json.dumps([self.command, self.path, body.decode()]))
        self.send_header("x-client-address", self.headers.get("x-loyalty-client-address", ""))
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER.encode())

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def operator_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program("rutas", fans=[])["ping"]


def _gateway(
    stack: Stack, folder: Path, work_dir: Path, change: Callable[[dict[str, Any]], None]
) -> EnvoyProcess:
    edit_config(folder, change)
    return EnvoyProcess.start_spec(
        gateway_spec(http_port=free_port(), upstreams=(stack.grpc_target,), gateway_dir=folder),
        work_dir=work_dir,
    )


def _add(route: dict[str, Any], cluster: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Where the docs say: the route before `not_found`, the cluster beside the API's."""

    def change(config: dict[str, Any]) -> None:
        table = routes(config)
        position = next(n for n, item in enumerate(table) if item.get("name") == "not_found")
        table.insert(position, route)
        config["static_resources"]["clusters"].append(cluster)

    return change


def _with_port(cluster: dict[str, Any], port: int) -> dict[str, Any]:
    [group] = cluster["load_assignment"]["endpoints"]
    [endpoint] = group["lb_endpoints"]
    endpoint["endpoint"]["address"]["socket_address"]["port_value"] = port
    return cluster


def test_a_documented_operator_route_reaches_its_upstream_untouched(
    stack: Stack, key: str, operator_server: int, tmp_path: Path
):
    route, cluster = documented_blocks()
    folder = Path(shutil.copytree(find_gateway_dir(), tmp_path / "gateway"))
    proxy = _gateway(
        stack, folder, tmp_path / "envoy", _add(route, _with_port(cluster, operator_server))
    )
    try:
        with httpx.Client(base_url=proxy.url, timeout=10) as client:
            got = client.get("/ops/estado?x=1")
            assert (got.status_code, got.text) == (200, ANSWER)
            assert got.headers["content-type"] == "text/plain"
            assert json.loads(got.headers["x-seen"]) == ["GET", "/ops/estado?x=1", ""]
            assert got.headers["x-client-address"] == "127.0.0.1"
            # A body request_check.lua would refuse (a key twice), with no API key: as sent.
            body = '{"a": 1, "a": 2}'
            sent = client.post(
                "/ops/eventos", content=body, headers={"content-type": "application/json"}
            )
            assert (sent.status_code, sent.text) == (200, ANSWER)
            assert json.loads(sent.headers["x-seen"]) == ["POST", "/ops/eventos", body]
            # The API beside it, unchanged.
            ping = client.get("/api/v1/ping", headers={"Authorization": f"Bearer {key}"})
            assert ping.json()["ok"] is True
            missing = client.get("/nada")
            assert missing.json()["error"]["codigo"] == "ruta_no_encontrada"
    finally:
        proxy.stop()


def test_without_the_per_route_config_the_route_is_refused(
    stack: Stack, operator_server: int, tmp_path: Path
):
    """Without it envelope.lua would answer the route 404 whatever its upstream says:
    every rendering (start, reload, check) refuses it, naming the route and the fix."""
    route, cluster = documented_blocks()
    del route["typed_per_filter_config"]
    folder = Path(shutil.copytree(find_gateway_dir(), tmp_path / "gateway"))
    with pytest.raises(
        EnvoyError,
        match=r"route 'ops_status' forwards to cluster 'ops_status' with the API's filters "
        r"on it \(envelope\.lua would answer it 404\): disable the transcoder and the Lua "
        r'filters on it with typed_per_filter_config \(docs/gateway\.md "Routes of your own"\)',
    ):
        _gateway(
            stack, folder, tmp_path / "envoy", _add(route, _with_port(cluster, operator_server))
        )
