"""Changing the gateway's configuration without downtime (runtime/gateway/reload.py): a real
Envoy in front of the stack's gRPC server, client threads calling it without pause, and
`loyalty gateway reload` swapping the descriptor set and the routes under them; not one
call may fail. A broken configuration is refused loudly and the running one keeps serving.

Every test works on its own copy of the gateway folder (never the repository's).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest
import yaml
from google.api import annotations_pb2
from google.protobuf import descriptor_pb2

from loyalty_grpc.runtime.gateway.admin import LISTENERS
from loyalty_grpc.runtime.gateway.config import (
    find_gateway_dir,
)
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.gateway.shape import (
    EnvoyError,
)
from loyalty_grpc.runtime.gateway.xds import install
from tests.e2e.stack import Stack
from tests.support import free_port

LOYALTY = [sys.executable, "-m", "loyalty_grpc.runtime.cli"]
# A new HTTP binding of PosService.PingGet, only in the changed descriptor set.
ALIAS = "/api/v1/ping/recargado"
# A new direct response, only in the changed envoy.yaml.
ROUTE = "/api/v1/estado-gateway"
ROUTE_BODY = '{"ok":true,"data":{"gateway":"recargado"}}'
REFUSED = "error: reload refused, Envoy keeps serving its current configuration: "


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program("recarga", fans=[])["ping"]


@pytest.fixture
def gateway_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(find_gateway_dir(), tmp_path / "gateway"))


@pytest.fixture
def gateway(stack: Stack, gateway_dir: Path, tmp_path: Path) -> Iterator[EnvoyProcess]:
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(),
            upstreams=(stack.grpc_target,),
            gateway_dir=gateway_dir,
            plain_http_beyond_loopback=True,
        ),
        work_dir=tmp_path / "envoy",
    )
    yield proxy
    proxy.stop()


class Load:
    """Client threads calling GET /api/v1/ping without pause: half keep one connection
    open, half open a new one for every call. Anything but a 200 with `ok: true` is a
    failure."""

    def __init__(self, url: str, key: str, threads: int = 4) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {key}"}
        self.ok = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n % 2 == 0,), daemon=True)
            for n in range(threads)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        self.wait_for(20)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _run(self, keep_alive: bool) -> None:
        limits = httpx.Limits(max_keepalive_connections=1 if keep_alive else 0)
        with httpx.Client(base_url=self.url, timeout=10, limits=limits) as client:
            while not self._stop.is_set():
                self._record(self._call(client))

    def _call(self, client: httpx.Client) -> str | None:
        try:
            response = client.get("/api/v1/ping", headers=self.headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.status_code != 200 or response.json().get("ok") is not True:
            return f"{response.status_code} {response.text}"
        return None

    def _record(self, failure: str | None) -> None:
        with self._lock:
            if failure is None:
                self.ok += 1
            else:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {failure}")

    def wait_for(self, calls: int, timeout: float = 60) -> None:
        """Until `calls` more calls succeeded: requests flow (now, after a swap)."""
        target = self.ok + calls
        deadline = time.monotonic() + timeout
        while self.ok < target:
            assert time.monotonic() < deadline, f"only {self.ok} calls, {self.failures[:5]}"
            time.sleep(0.02)


def reload(work_dir: Path) -> subprocess.CompletedProcess[str]:
    """`loyalty gateway reload`, as an operator runs it."""
    return subprocess.run(
        [*LOYALTY, "gateway", "reload", "--work-dir", str(work_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def reloaded(work_dir: Path, load: Load) -> str:
    """A reload that succeeded, while the load's calls kept succeeding."""
    calls = load.ok
    result = reload(work_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert load.ok > calls
    return result.stdout


def get(proxy: EnvoyProcess, path: str, key: str) -> httpx.Response:
    """On a new connection: what a client connecting now gets."""
    return httpx.get(proxy.url + path, headers={"Authorization": f"Bearer {key}"}, timeout=10)


# ---------------------------------------------------------------- changing the gateway folder


def add_ping_alias(descriptor_set: Path) -> None:
    """A descriptor set regenerated with one more HTTP binding: GET ALIAS -> PingGet."""
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes())
    [method] = [
        method
        for file in descriptors.file
        for service in file.service
        for method in service.method
        if method.name == "PingGet"
    ]
    method.options.Extensions[annotations_pb2.http].additional_bindings.add(get=ALIAS)
    descriptor_set.write_bytes(descriptors.SerializeToString())


def add_alias_binding(gateway_dir: Path) -> None:
    """What scripts/gen_edge.py and gen_request_check.py would write for the new binding:
    its route (GET ping's, under the alias's name and path) and its entries in the edge's
    and the strict check's tables (the gateway forwards only the bindings they know)."""
    name = f"GET {ALIAS}"

    def change(config: dict[str, Any]) -> None:
        position, ping = next(
            (n, route)
            for n, route in enumerate(routes(config))
            if route.get("name") == "GET /api/v1/ping"
        )
        alias = {
            **ping,
            "name": name,
            "match": {**ping["match"], "safe_regex": {"regex": f"{ALIAS}/?"}},
        }
        routes(config).insert(position, alias)

    edit_config(gateway_dir, change)
    for lua, entry in (
        ("envelope.lua", '  ["GET /api/v1/ping"] = '),
        ("request_check.lua", '  ["GET /api/v1/ping"] = '),
    ):
        path = gateway_dir / lua
        text = path.read_text(encoding="utf-8")
        start = text.index(entry)
        end = (
            text.index("\n  [", start + 1)
            if lua == "request_check.lua"
            else text.index("\n", start)
        )
        copy = text[start:end].replace("GET /api/v1/ping", name)
        path.write_text(text[:start] + copy + "\n" + text[start:], encoding="utf-8")


def edit_config(gateway_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = gateway_dir / "envoy.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def listener(config: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = config["static_resources"]["listeners"][0]
    return found


def routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    manager = listener(config)["filter_chains"][0]["filters"][0]["typed_config"]
    found: list[dict[str, Any]] = manager["route_config"]["virtual_hosts"][0]["routes"]
    return found


def add_route(config: dict[str, Any]) -> None:
    """A direct response before the /api/v1/ prefix (the transcoder off on it, like the
    OpenAPI document's route: it would answer 404 for a path outside the proto)."""
    position = next(
        n for n, route in enumerate(routes(config)) if route["match"] == {"prefix": "/api/v1/"}
    )
    routes(config).insert(
        position,
        {
            "match": {"path": ROUTE},
            "direct_response": {"status": 200, "body": {"inline_string": ROUTE_BODY}},
            "response_headers_to_add": [
                {
                    "header": {"key": "content-type", "value": "application/json"},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                }
            ],
            "typed_per_filter_config": {
                "envoy.filters.http.grpc_json_transcoder": {
                    "@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig",
                    "disabled": True,
                }
            },
        },
    )


# ---------------------------------------------------------------- swaps under load


def test_descriptor_and_routes_change_while_requests_flow(
    gateway: EnvoyProcess, gateway_dir: Path, key: str
):
    with Load(gateway.url, key) as load:
        assert get(gateway, ALIAS, key).status_code == 404

        # (a) The descriptor set: the transcoder of the new listener knows the new binding
        # (and the route table and the edge, which forward only the bindings they know).
        add_ping_alias(gateway_dir / "loyalty_pos.pb")
        add_alias_binding(gateway_dir)
        assert "listeners updated" in reloaded(gateway.work_dir, load)
        load.wait_for(50)
        alias = get(gateway, ALIAS, key)
        assert alias.status_code == 200, alias.text
        assert alias.json()["data"]["programa"] == "Club recarga"

        # (b) The routes. A connection opened before the reload is closed after its next
        # response; its client's next call, on a new connection, sees the new route.
        # (The client must not drop the idle connection itself: httpx does after 5 s.)
        keep = httpx.Limits(keepalive_expiry=120)
        with httpx.Client(base_url=gateway.url, timeout=10, limits=keep) as before:
            assert before.get(ROUTE).status_code == 404
            edit_config(gateway_dir, add_route)
            assert "listeners updated" in reloaded(gateway.work_dir, load)
            last_old = before.get("/api/v1/ping", headers={"Authorization": f"Bearer {key}"})
            assert last_old.status_code == 200
            assert last_old.headers["connection"] == "close"
            assert before.get(ROUTE).text == ROUTE_BODY
        load.wait_for(50)

        route = get(gateway, ROUTE, key)
        assert (route.status_code, route.text) == (200, ROUTE_BODY)
        assert route.headers["content-type"] == "application/json"
        # The old routes still work, and the new descriptor is still the one in use.
        assert get(gateway, "/api/v1/ping", key).json()["ok"] is True
        assert get(gateway, ALIAS, key).status_code == 200
        assert get(gateway, "/api/v1/openapi.json", key).json()["openapi"].startswith("3.1")
        missing = get(gateway, "/api/v1/nada", key)
        assert missing.json()["error"]["codigo"] == "ruta_no_encontrada"

        assert "unchanged" in reloaded(gateway.work_dir, load)
        load.wait_for(50)
    assert load.failures == []
    # loyalty_gateway_reloads_total (runtime/gateway/series.py): the two that changed
    # something, not the one that did not.
    assert gateway.work.reloads() == 2
    # The work directory holds what runs now, and only the files it uses.
    assert ROUTE in gateway.config_path.read_text(encoding="utf-8")
    # (Both Lua files, the descriptor set, the OpenAPI document.)
    assert len(list((gateway.work_dir / "assets").iterdir())) == 4


# ---------------------------------------------------------------- refusals


def not_yaml(gateway_dir: Path) -> None:
    (gateway_dir / "envoy.yaml").write_text("static_resources: [\n  {listeners: \n")


def route_to_nowhere(gateway_dir: Path) -> None:
    def change(config: dict[str, Any]) -> None:
        for forward in [route for route in routes(config) if "route" in route]:
            forward["route"]["cluster"] = "no_such_cluster"

    edit_config(gateway_dir, change)


def listener_on_another_address(gateway_dir: Path) -> None:
    """Valid for `envoy --mode validate`, refused by the running Envoy: the new address
    cannot be bound while the old one is open (no SO_REUSEPORT)."""

    def change(config: dict[str, Any]) -> None:
        listener(config)["address"]["socket_address"]["address"] = "0.0.0.0"

    edit_config(gateway_dir, change)


def overload_change(gateway_dir: Path) -> None:
    def change(config: dict[str, Any]) -> None:
        monitor = config["overload_manager"]["resource_monitors"][0]["typed_config"]
        monitor["max_active_downstream_connections"] = 5000

    edit_config(gateway_dir, change)


@pytest.mark.parametrize(
    ("breakage", "reason"),
    [
        (not_yaml, "envoy.yaml is not valid YAML"),
        (route_to_nowhere, "no_such_cluster"),
        (listener_on_another_address, "Envoy refused the new listeners: cannot bind "),
        (
            overload_change,
            "changed outside static_resources (overload_manager): Envoy reads "
            "that only at start, restart the gateway",
        ),
    ],
)
def test_a_broken_configuration_is_refused_and_the_running_one_keeps_serving(
    gateway: EnvoyProcess,
    gateway_dir: Path,
    key: str,
    breakage: Callable[[Path], None],
    reason: str,
):
    with Load(gateway.url, key) as load:
        edit_config(gateway_dir, add_route)
        reloaded(gateway.work_dir, load)
        running = {
            path: path.read_bytes()
            for path in gateway.work_dir.rglob("*")
            if path.is_file()
            and path.parent.name != "candidate"
            and path.name not in ("envoy.log", ".lock")
        }
        breakage(gateway_dir)
        result = reload(gateway.work_dir)
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stdout == ""
        assert result.stderr.startswith(REFUSED), result.stderr
        assert reason in result.stderr
        load.wait_for(50)
        assert get(gateway, ROUTE, key).text == ROUTE_BODY
        assert get(gateway, ALIAS, key).status_code == 404
        # Envoy runs the listener it had.
        admin = gateway.admin
        running_version = yaml.safe_load(running[gateway.work.listeners])["version_info"]
        assert LISTENERS.version(admin.xds_stats()) == running_version
    assert load.failures == []
    assert gateway.work.reloads() == 1  # the refused one is not counted
    # Nothing Envoy reads changed (a refused listener file was put back).
    assert {path: path.read_bytes() for path in running} == running
    assert {
        path
        for path in gateway.work_dir.rglob("*")
        if path.is_file() and path.parent.name == "assets"
    } == {path for path in running if path.parent.name == "assets"}


# ---------------------------------------------------------------- start and stop


def envoy_pids(bootstrap: Path) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(bootstrap).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_port_in_use_fails_at_start(tmp_path: Path):
    """Envoy refuses a listener it cannot bind and keeps running without it: the start
    must see that, stop Envoy and say why."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(EnvoyError, match=f"cannot bind '127.0.0.1:{port}': Address already"):
            EnvoyProcess.start_spec(
                gateway_spec(http_port=port, upstreams=("127.0.0.1:1",), listen_host="127.0.0.1"),
                work_dir=tmp_path,
            )
    assert envoy_pids(tmp_path / "bootstrap.yaml") == []


def test_reload_without_a_running_gateway_says_so(gateway: EnvoyProcess):
    gateway.stop()
    result = reload(gateway.work_dir)
    assert result.returncode == 1
    assert "no Envoy is serving from" in result.stderr


def test_a_gateway_without_a_series_server_is_not_reloaded(tmp_path: Path):
    """A gateway with a metrics listener whose supervisor serves no series (started by an
    earlier version: its stats page went straight to the admin socket) is refused a reload
    that would route its stats page to a series server that is not there, and keeps what
    it runs."""
    spec = gateway_spec(
        http_port=free_port(),
        upstreams=("127.0.0.1:1",),
        listen_host="127.0.0.1",
        metrics_port=free_port(),
    )
    proxy = EnvoyProcess(
        work=install(spec, tmp_path / "envoy"),
        http_port=spec.http_port,
        listen_host="127.0.0.1",
        serve_series=False,
    )
    proxy.launch()
    try:
        running = {path: path.read_bytes() for path in proxy.work_dir.rglob("*") if path.is_file()}
        result = reload(proxy.work_dir)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "does not serve the gateway's series" in result.stderr
        assert "restart it" in result.stderr
        assert {path: path.read_bytes() for path in running} == running
        assert proxy.work.reloads() == 0
    finally:
        proxy.stop()
