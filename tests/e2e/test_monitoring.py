"""The monitoring that ships, against real processes (issue 24 §3):

- every metric the alert rules (deploy/prometheus/alerts.yml) and the Grafana dashboard
  (deploy/grafana/loyalty.json) query is exported: by a real `loyalty serve --workers 2`
  (its /metrics), by a real Envoy (its metrics listener, /stats/prometheus), or is
  Prometheus' own `up`;
- `loyalty_build_info{version}` is 1 with the package's version;
- a worker killed with SIGKILL stops counting in the summed gauges: after the supervisor
  replaced it, `loyalty_db_pool_size` is the same as before (2 workers' worth), not 3;
- the gateway's own series (runtime/gateway/series.py) are on the same scrape as Envoy's,
  by the same names under `loyalty gateway run` and `loyalty up`: Envoy SIGKILLed under
  each is counted in `loyalty_gateway_restarts_total`, with its exit as -9, on a page that
  also has Envoy's own series of the new Envoy; a `gateway reload` that changes a route
  in `loyalty_gateway_reloads_total`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest
from prometheus_client.parser import text_string_to_metric_families

import loyalty_grpc
from loyalty_grpc.runtime.gateway import series
from loyalty_grpc.runtime.gateway.config import find_gateway_dir
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.process.supervision import Backoff
from loyalty_grpc.store.migrate import upgrade
from tests.e2e.processes import LOYALTY, Running, demo_up_args, loyalty_env, worker_processes
from tests.e2e.test_gateway_reload import add_route, edit_config
from tests.monitoring import queried_names
from tests.support import ADMIN_TOKEN, free_port

WORKERS = 2
HOST = "127.0.0.1"
# Prometheus makes these itself for every scrape target.
PROMETHEUS_OWN = frozenset({"up"})
WAIT_SECONDS = 60


@dataclass(frozen=True)
class Served:
    serve: Running
    metrics_port: int
    data_dir: Path
    ready_at: float  # time.monotonic() when every worker served and /metrics answered

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Sample name -> (labels, value) of every sample on /metrics."""
        page = httpx.get(f"http://{HOST}:{self.metrics_port}/metrics", timeout=10)
        assert page.status_code == 200
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(page.text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        return samples

    def value(self, name: str) -> float:
        ((_, value),) = self.scrape()[name]
        return value


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_SECONDS} s: {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    url = create_database()
    upgrade(url)
    metrics_port = free_port()
    cwd = tmp_path_factory.mktemp("monitoring")
    data_dir = cwd / "data"
    serve = Running(
        [
            "serve",
            "--grpc-host",
            HOST,
            "--grpc-port",
            str(free_port()),
            "--workers",
            str(WORKERS),
            "--metrics-port",
            str(metrics_port),
            "--data-dir",
            str(data_dir),
        ],
        cwd,
        loyalty_env(
            LOYALTY_DATABASE_URL=url, LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN, LOYALTY_LOG_FORMAT="json"
        ),
    )
    try:
        serve.wait_for_workers(WORKERS)
        running = Served(serve, metrics_port, data_dir, 0.0)

        def answers() -> bool:
            try:
                running.scrape()
            except httpx.TransportError:
                return False
            return True

        _until(answers, "/metrics answers")
        yield replace(running, ready_at=time.monotonic())
    finally:
        if serve.proc.poll() is None:
            serve.stop()


@pytest.fixture(scope="module")
def envoy_exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Envoy's series on its metrics listener (no server behind it: none is needed), after
    one request (Envoy creates a response-class series when it first answers one)."""
    metrics_port, http_port = free_port(), free_port()
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=http_port,
            upstreams=(f"{HOST}:1",),
            listen_host=HOST,
            metrics_port=metrics_port,
        ),
        work_dir=tmp_path_factory.mktemp("monitoring-envoy") / "envoy",
    )
    try:
        httpx.get(f"http://{HOST}:{http_port}/v1/ping", timeout=10)  # any answer will do
        page = httpx.get(f"http://{HOST}:{metrics_port}/stats/prometheus", timeout=10)
        assert page.status_code == 200
        return page.text
    finally:
        proxy.stop()


def _names(exposition: str) -> set[str]:
    """Sample names exactly as written (prometheus_client's parser would add `_total` to
    a counter of Envoy's that has none, and PromQL sees the name as written)."""
    return {
        re.split(r"[{\s]", line, maxsplit=1)[0]
        for line in exposition.splitlines()
        if line.strip() and not line.startswith("#")
    }


def test_every_queried_metric_is_exported(served: Served, envoy_exposition: str) -> None:
    page = httpx.get(f"http://{HOST}:{served.metrics_port}/metrics", timeout=10)
    exported = _names(page.text) | _names(envoy_exposition) | PROMETHEUS_OWN
    queried = queried_names()
    assert "loyalty_requests_total" in queried  # the files were read
    assert "envoy_server_days_until_first_cert_expiring" in queried
    missing = {name: sorted(where) for name, where in queried.items() if name not in exported}
    assert not missing, f"queried but not exported: {missing}"


def test_build_info(served: Served) -> None:
    assert served.scrape()["loyalty_build_info"] == [({"version": loyalty_grpc.__version__}, 1.0)]


def test_a_sigkilled_workers_gauges_stop_counting(served: Served) -> None:
    """The issue's run: 48 with 2 live workers of 16 after a SIGKILL. The pool series are
    written by each worker once a second; the dead one's must be dropped by the
    supervisor (prometheus_client's mark_process_dead) when it reaps it.

    The worker has served longer than `Backoff.stable`, as in production: the supervisor
    then starts its successor at once, in the same look that sees the death (a worker
    that dies sooner is restarted after a back-off, a path that reaped it already)."""
    parent = served.serve.proc.pid
    # Not a timed assertion: the wait that makes the kill the production case.
    time.sleep(max(0.0, served.ready_at + 2 * Backoff().stable + 0.5 - time.monotonic()))
    _until(lambda: served.value("loyalty_db_pool_size") > 0, "the workers wrote their pools")
    before = served.value("loyalty_db_pool_size")
    assert before % WORKERS == 0
    victim, *survivors = worker_processes(parent)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    def replaced() -> bool:
        pids = {w.pid for w in worker_processes(parent)}
        return len(pids) == WORKERS and victim.pid not in pids

    _until(replaced, "the dead worker was replaced")
    served.serve.wait_for(f"(pid {victim.pid}) killed by SIGKILL")
    served.serve.wait_for("restarted (pid")
    metrics_dir = served.data_dir / "metrics"
    left = sorted(p.name for p in metrics_dir.glob(f"gauge_live*_{victim.pid}.db"))
    assert not left, f"the dead worker's live gauge files are still there: {left}"
    (newcomer,) = {w.pid for w in worker_processes(parent)} - {w.pid for w in survivors}
    # Once the new worker has written its pool (its own file, then a full refresh
    # period), the sum is two workers' worth again: never three.
    _until(
        lambda: any(metrics_dir.glob(f"gauge_livesum_{newcomer}.db")),
        "the new worker wrote its gauges",
    )
    samples = []
    for _ in range(3):
        time.sleep(1.0)  # > POOL_REFRESH_SECONDS: the new worker has written its pool
        samples.append(served.value("loyalty_db_pool_size"))
    assert samples == [before] * 3, samples


GATEWAY_SERIES = (
    series.RESTARTS,
    series.START_TIME,
    series.LAST_EXIT_CODE,
    series.LAST_EXIT_TIME,
    series.RELOADS,
    series.BUILD_INFO,
)


def _gateway_page(metrics_port: int) -> dict[str, float] | None:
    """Unlabelled sample name -> value on the gateway's scrape (the build info by its
    name), or None while nothing answers there."""
    try:
        page = httpx.get(f"http://{HOST}:{metrics_port}/stats/prometheus", timeout=10)
    except httpx.TransportError:
        return None
    if page.status_code != 200:
        return None
    values: dict[str, float] = {}
    for line in page.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.removesuffix("{}")] = float(value)
            if name.startswith(f"{series.BUILD_INFO}{{"):
                values[series.BUILD_INFO] = float(value)
    return values


def _envoy_child(parent: int) -> int:
    (envoy,) = [c.pid for c in psutil.Process(parent).children() if c.name() == "envoy"]
    return int(envoy)


def _sigkill_envoy_and_see_it_counted(supervisor: Running, metrics_port: int) -> None:
    """The supervisor's series before and after Envoy is SIGKILLed, on the scrape that
    serves Envoy's own series."""
    first: dict[str, float] = {}

    def answers() -> bool:
        nonlocal first
        first = _gateway_page(metrics_port) or {}
        return bool(first)

    _until(answers, "the gateway's metrics listener answers")
    for name in GATEWAY_SERIES:
        assert name in first, f"{name} not on the gateway's scrape"
    assert first[series.RESTARTS] == 0
    assert first[series.LAST_EXIT_CODE] == 0
    assert first[series.LAST_EXIT_TIME] == 0
    assert first[series.RELOADS] == 0
    assert first[series.BUILD_INFO] == 1
    assert first["envoy_server_live"] == 1  # Envoy's own, on the same page
    victim = _envoy_child(supervisor.proc.pid)
    os.kill(victim, signal.SIGKILL)
    after: dict[str, float] = {}

    def counted() -> bool:
        nonlocal after
        after = _gateway_page(metrics_port) or {}
        return after.get(series.RESTARTS) == 1

    _until(counted, "the restart is counted on the gateway's scrape")
    assert _envoy_child(supervisor.proc.pid) != victim
    assert after[series.LAST_EXIT_CODE] == -signal.SIGKILL
    assert after[series.START_TIME] > first[series.START_TIME]
    assert after[series.LAST_EXIT_TIME] >= first[series.START_TIME]
    assert after["envoy_server_live"] == 1  # the new Envoy's, on the same page


def test_gateway_run_counts_envoys_restarts_on_its_scrape(tmp_path: Path) -> None:
    metrics_port = free_port()
    work_dir = tmp_path / "envoy"
    gateway = Running(
        [
            "gateway",
            "run",
            "--http-host",
            HOST,
            "--http-port",
            str(free_port()),
            "--upstream",
            f"{HOST}:{free_port()}",
            "--envoy-metrics-port",
            str(metrics_port),
            "--work-dir",
            str(work_dir),
        ],
        tmp_path,
        loyalty_env(),
    )
    try:
        gateway.wait_for("serving")
        _sigkill_envoy_and_see_it_counted(gateway, metrics_port)
        gateway.wait_for("killed by SIGKILL")
        # A reload that changes a route is counted on the same scrape; it is no restart.
        changed = Path(shutil.copytree(find_gateway_dir(), tmp_path / "gateway"))
        edit_config(changed, add_route)
        command = [*LOYALTY, "gateway", "reload", "--work-dir", str(work_dir)]
        reloaded = subprocess.run(
            [*command, "--gateway-dir", str(changed)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert reloaded.returncode == 0, reloaded.stdout + reloaded.stderr
        assert "listeners updated" in reloaded.stdout
        page = _gateway_page(metrics_port)
        assert page is not None
        assert page[series.RELOADS] == 1
        assert page[series.RESTARTS] == 1
    finally:
        if gateway.proc.poll() is None:
            gateway.stop()


def test_up_counts_envoys_restarts_on_the_gateways_scrape(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    """The same series, by the same names, when `loyalty up` supervises Envoy."""
    metrics_port = free_port()
    up = Running(
        [
            *demo_up_args(tmp_path / "data", free_port()),
            "--workers",
            "1",
            "--envoy-metrics-port",
            str(metrics_port),
        ],
        tmp_path,
        loyalty_env(LOYALTY_DATABASE_URL=create_database(), LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN),
    )
    try:
        up.wait_for("loyalty is up")
        _sigkill_envoy_and_see_it_counted(up, metrics_port)
        up.wait_for("killed by SIGKILL")
    finally:
        if up.proc.poll() is None:
            up.stop()
