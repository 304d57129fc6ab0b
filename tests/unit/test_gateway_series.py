"""The gateway's own series (runtime/gateway/series.py): what the supervisor records, as
Prometheus reads it, and the series server's answers on its Unix socket (mode 0600)
when Envoy's admin socket does not answer (with a real Envoy: tests/e2e/test_monitoring.py,
tests/e2e/test_envoy_admin.py)."""

from __future__ import annotations

import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import loyalty_grpc
from loyalty_grpc.runtime.gateway import series
from loyalty_grpc.runtime.gateway.admin import EnvoyAdmin
from loyalty_grpc.runtime.gateway.series import GatewaySeries, SeriesServer
from loyalty_grpc.runtime.gateway.xds import WorkDir


def samples(gateway: GatewaySeries) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(gateway.exposition().decode()):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                found[sample.name] = sample.value
    return found


def test_every_series_is_there_from_the_start() -> None:
    assert samples(GatewaySeries()) == {
        series.RESTARTS: 0,
        series.START_TIME: 0,
        series.LAST_EXIT_CODE: 0,
        series.LAST_EXIT_TIME: 0,
        series.RELOADS: 0,
        series.BUILD_INFO: 1,
    }
    text = GatewaySeries().exposition().decode()
    assert f'{series.BUILD_INFO}{{version="{loyalty_grpc.__version__}"}} 1.0' in text
    kinds = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert kinds["loyalty_gateway_restarts"] == kinds["loyalty_gateway_reloads"] == "counter"


def test_starts_ends_and_restarts(tmp_path: Path) -> None:
    work = WorkDir(tmp_path)
    gateway = GatewaySeries(reloads=work.reloads)
    before = time.time()
    gateway.started()
    gateway.ended(-signal.SIGKILL)
    gateway.restarted()
    gateway.started()
    work.count_reload()
    work.count_reload()
    found = samples(gateway)
    assert found[series.RESTARTS] == 1
    assert found[series.LAST_EXIT_CODE] == -9
    assert before <= found[series.LAST_EXIT_TIME] <= found[series.START_TIME] <= time.time()
    assert found[series.RELOADS] == 2
    assert work.reloads_file.read_text() == "2\n"


def test_restarts_counted_from_many_threads() -> None:
    gateway = GatewaySeries()

    def restart_often() -> None:
        for _ in range(1000):
            gateway.restarted()

    threads = [threading.Thread(target=restart_often) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert gateway.restarts == 4000


def test_an_unreadable_reload_count_does_not_fail_the_scrape(tmp_path: Path) -> None:
    work = WorkDir(tmp_path)
    work.reloads_file.write_text("not a number\n")
    assert samples(GatewaySeries(reloads=work.reloads))[series.RELOADS] == 0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SeriesServer]:
    """A series server whose Envoy admin socket nobody serves."""
    work = WorkDir(tmp_path / "envoy")
    work.secure_admin_dir()
    running = SeriesServer(work.series_socket, GatewaySeries(), EnvoyAdmin(work.admin_socket))
    try:
        yield running
    finally:
        running.close()


def test_the_socket_is_this_users_alone(server: SeriesServer) -> None:
    found = server.path.stat()
    assert stat.S_ISSOCK(found.st_mode)
    assert stat.S_IMODE(found.st_mode) == 0o600
    assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o700


def test_without_envoy_the_scrape_fails_loudly(server: SeriesServer) -> None:
    """503 with the reason: Prometheus marks the target down (LoyaltyGatewayDown) rather
    than take the gateway's series alone for a whole page."""
    status, body = EnvoyAdmin(server.path).get("/stats/prometheus")
    assert status == 503
    assert "Envoy's admin interface does not answer" in body
    assert series.RESTARTS not in body


@pytest.mark.parametrize("path", ["/", "/ready", "/quitquitquit", "/stats", "/stats/prometheus/"])
def test_any_other_path_is_a_404(server: SeriesServer, path: str) -> None:
    assert EnvoyAdmin(server.path).get(path)[0] == 404


def test_close_removes_the_socket(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "envoy")
    work.secure_admin_dir()
    running = SeriesServer(work.series_socket, GatewaySeries(), EnvoyAdmin(work.admin_socket))
    running.close()
    assert not work.series_socket.exists()
