"""Envoy's admin interface is a Unix socket only the gateway's user can open, never a TCP
port; the metrics listener (LOYALTY_ENVOY_METRICS_PORT) serves Envoy's Prometheus series
(with the gateway's own, appended by the supervisor's series server on a Unix socket of
the same folder and mode) and /ready and nothing else of it: the admin API's dangerous
paths sent there (POST /quitquitquit, /config_dump, /logging, path tricks) get a 404 or
400 and Envoy keeps serving. A real Envoy on loopback, with no server behind it (none is needed)."""

from __future__ import annotations

import http.client
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.gateway.shape import (
    EnvoyError,
)
from tests.support import free_port

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Gateway:
    proxy: EnvoyProcess
    metrics_port: int

    def request(self, method: str, path: str) -> tuple[int, str]:
        """`path` sent exactly as written (no client-side normalisation)."""
        connection = http.client.HTTPConnection(HOST, self.metrics_port, timeout=10)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", errors="replace")
        finally:
            connection.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    metrics_port = free_port()
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(),
            upstreams=(f"{HOST}:1",),
            listen_host=HOST,
            metrics_port=metrics_port,
        ),
        work_dir=tmp_path_factory.mktemp("admin") / "envoy",
    )
    try:
        yield Gateway(proxy, metrics_port)
    finally:
        proxy.stop()


def test_the_admin_socket_is_this_users_alone(gateway: Gateway) -> None:
    """Envoy 1.40 creates the socket with the mode of the configuration (0600), and its
    folder is 0700: another user can neither open nor even reach it."""
    socket_path = gateway.proxy.work.admin_socket
    # The supervisor's series server (runtime/gateway/series.py), beside it, likewise.
    for path in (socket_path, gateway.proxy.work.series_socket):
        found = path.stat()
        assert stat.S_ISSOCK(found.st_mode)
        assert stat.S_IMODE(found.st_mode) == 0o600
        assert found.st_uid == os.getuid()
    folder = socket_path.parent.stat()
    assert stat.S_IMODE(folder.st_mode) == 0o700
    assert folder.st_uid == os.getuid()
    assert gateway.proxy.admin.get("/ready") == (200, "LIVE\n")
    assert not gateway.proxy.work.legacy_admin_address.exists()


NOBODY = 65534


def _connects_as_nobody(path: Path) -> str:
    """In a forked child that became `nobody`: what connecting to `path` gives."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        code = 3
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(path))
            code = 0
        except PermissionError:
            code = 1
        except OSError:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return {0: "connected", 1: "refused", 2: "other error"}.get(
        os.waitstatus_to_exitcode(status), "failed"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_another_user_cannot_open_the_admin_socket(gateway: Gateway) -> None:
    """As `nobody`, connecting to the socket is refused (its folder alone would refuse
    it); root, standing in for the service's user here, gets in."""
    assert _connects_as_nobody(gateway.proxy.work.admin_socket) == "refused"
    assert _connects_as_nobody(gateway.proxy.work.series_socket) == "refused"
    assert gateway.proxy.admin.get("/ready")[0] == 200


def test_no_tcp_port_is_the_admin_interface(gateway: Gateway) -> None:
    """Envoy listens on the API port and the metrics port, nothing else."""
    envoy = psutil.Process(gateway.proxy.pid)
    listening = {
        connection.laddr.port
        for connection in envoy.net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    }
    assert listening == {gateway.proxy.http_port, gateway.metrics_port}


def test_the_metrics_listener_serves_prometheus_and_ready(gateway: Gateway) -> None:
    status, text = gateway.request("GET", "/stats/prometheus")
    assert status == 200
    assert "envoy_http_downstream_rq_total" in text
    assert "\nloyalty_gateway_restarts_total 0.0\n" in text  # the supervisor's, appended
    assert 'envoy_cluster_upstream_rq_total{envoy_cluster_name="loyalty_grpc"}' in text
    assert gateway.request("GET", "/ready") == (200, "LIVE\n")
    # Its own parameters are the admin endpoint's (read-only).
    status, text = gateway.request("GET", "/stats/prometheus?filter=server%5C.live")
    assert status == 200
    assert "envoy_server_live{} 1" in text
    assert "envoy_http_downstream_rq_total" not in text  # the filter reached Envoy


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/quitquitquit"),
        ("GET", "/quitquitquit"),
        ("POST", "/healthcheck/fail"),
        ("POST", "/drain_listeners"),
        ("POST", "/logging?level=trace"),
        ("POST", "/runtime_modify?loyalty.backstop_min=200"),
        ("POST", "/reset_counters"),
        ("GET", "/config_dump"),
        ("GET", "/config_dump?include_eds"),
        ("GET", "/clusters"),
        ("GET", "/listeners"),
        ("GET", "/server_info"),
        ("GET", "/stats"),
        ("GET", "/certs"),
        ("GET", "/"),
        ("POST", "/stats/prometheus"),
        ("POST", "/ready"),
        ("HEAD", "/ready"),
        ("GET", "/STATS/PROMETHEUS"),
        ("GET", "/stats/prometheus/"),
        ("GET", "//quitquitquit"),
        ("POST", "/stats/prometheus/../../quitquitquit"),
        ("POST", "/ready/../quitquitquit"),
        ("GET", "/stats/prometheus/../../config_dump"),
        ("GET", "/stats%2Fprometheus"),
        ("POST", "/stats/prometheus%2F..%2F..%2Fquitquitquit"),
        ("GET", "/stats/prometheus%00/../config_dump"),
    ],
)
def test_nothing_else_of_the_admin_interface_is_reachable(
    gateway: Gateway, method: str, path: str
) -> None:
    status, body = gateway.request(method, path)
    assert status in (400, 404), (status, body[:200])
    assert "LIVE" not in body
    assert "configs" not in body  # no config dump
    assert gateway.proxy.poll() is None
    assert gateway.proxy.admin.get("/ready") == (200, "LIVE\n")


def test_envoy_still_serves_after_every_attack(gateway: Gateway) -> None:
    """(After the parametrised attacks above, in file order.) Not stopped, not draining,
    not failing its health check, its log level untouched."""
    admin = gateway.proxy.admin
    assert gateway.proxy.poll() is None
    assert admin.json("/server_info")["state"] == "LIVE"
    _, stats = admin.get("/stats?filter=^server%5C.(state|live)$")
    assert "server.live: 1" in stats
    assert "server.state: 0" in stats
    _, levels = admin.get("/logging")
    assert ": trace" not in levels


def test_a_second_gateway_on_the_same_work_dir_is_refused(gateway: Gateway) -> None:
    """It would take the admin socket over (Envoy unlinks the path before binding) and
    rewrite the files the first one runs."""
    refused = r"an Envoy already serves from .* \(its admin socket .* answers\)"
    with pytest.raises(EnvoyError, match=refused):
        EnvoyProcess.start_spec(
            gateway_spec(http_port=free_port(), upstreams=(f"{HOST}:1",), listen_host=HOST),
            work_dir=gateway.proxy.work_dir,
        )
    assert gateway.proxy.admin.get("/ready") == (200, "LIVE\n")


def test_a_work_dir_too_deep_for_a_socket_path_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    with pytest.raises(EnvoyError, match="over the kernel's 107: use a shorter work directory"):
        EnvoyProcess.start_spec(
            gateway_spec(http_port=free_port(), upstreams=(f"{HOST}:1",)), work_dir=deep
        )
