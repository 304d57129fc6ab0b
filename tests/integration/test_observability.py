"""Observability of a real server (build_server, real PostgreSQL): the counters per method
and codigo, the latency histogram, the pool gauges, the request id, one JSON log line per
call without personal data, and the /metrics endpoint (one process, and several processes
writing to one PROMETHEUS_MULTIPROC_DIR)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from google.protobuf import struct_pb2
from prometheus_client import REGISTRY, values
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Connection

from loyalty_grpc.api import observability
from loyalty_grpc.api.observability import (
    CALLS_LOGGER,
    POOL_SERIES,
    REQUEST_ID_KEY,
    log_context,
)
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.runtime import metrics
from loyalty_grpc.runtime.logs import JsonFormatter
from tests.support import ADMIN_TOKEN, Admin, error_info, free_port

PING = "loyalty.v1.PosService/Ping"
TX = "loyalty.v1.PosService/RegisterTx"
RESOLVE = "loyalty.v1.PosService/ResolveFan"
# Personal data and secrets that must never reach a log line.
FAN_ID = "OBS" + secrets.token_hex(4).upper()
CORREO = f"secreto.{secrets.token_hex(4)}@example.com"
NOMBRE = f"Nombre{secrets.token_hex(4)}"
QR = "qr" + secrets.token_hex(6)
KEY = "lp_vivo_" + secrets.token_hex(16)
ID_EXTERNO = "venta-" + secrets.token_hex(6)
TERMINAL = "terminal-" + secrets.token_hex(4)


class Captured(logging.Handler):
    """Formats every record as the server would (JSON) and keeps the lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter(log_context))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def calls(self) -> list[dict[str, object]]:
        return [line for line in map(json.loads, self.lines) if line["logger"] == CALLS_LOGGER]


@pytest.fixture(scope="module")
def server_settings() -> dict[str, Any]:
    """The call limit asks the database on the call's own thread (batches of one): with
    batches, the limit's settler thread would check a connection out of the same engine a
    second after the calls, while the pool tests count what the calls hold."""
    return {"rate_limit_batch": 1}


@pytest.fixture(scope="module")
def clave_id(channel: grpc.Channel) -> int:
    admin = Admin(bo_grpc.BackofficeServiceStub(channel), ADMIN_TOKEN)
    document = {
        "programas": [
            {
                "id": "obs",
                "nombre": "Club Obs",
                "tasa_puntos": "0.1",
                "qr_url": "https://o.example/f",
                "claves": [
                    {
                        "clave": KEY,
                        "integracion": "Caja Obs",
                        "permisos": ["fan:leer", "tx:escribir"],
                    }
                ],
                "fans": [
                    {
                        "id": FAN_ID,
                        "nombre": NOMBRE,
                        "correo": CORREO,
                        "socio_desde": 2019,
                        "temporadas": 2,
                        "qr_token": QR,
                        "puntos": 10,
                    }
                ],
            }
        ]
    }
    admin.stub.ApplyFixture(
        bo.ApplyFixtureRequest(fixture_json=json.dumps(document)), metadata=admin.md
    )
    keys = admin.stub.ListKeys(bo.ListKeysRequest(programa="obs"), metadata=admin.md)
    return next(k.id for k in keys.keys if k.integracion == "Caja Obs")


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


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pos_grpc.PosServiceStub:
    return pos_grpc.PosServiceStub(channel)


def md(key: str = KEY, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
    extra = ((REQUEST_ID_KEY, request_id),) if request_id else ()
    return (("authorization", f"Bearer {key}"), *extra)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def trailing(call_or_error: Any) -> dict[str, object]:
    """Trailing metadata of a finished call (grpc.Call) or failed one (grpc.RpcError)."""
    return dict(call_or_error.trailing_metadata() or ())


def test_counters_move_per_method_and_codigo(stub, clave_id):
    ok_before = sample("loyalty_requests_total", method=PING, codigo="ok")
    bad_before = sample("loyalty_requests_total", method=PING, codigo="clave_invalida")
    anon_before = sample("loyalty_requests_total", method=PING, codigo="no_autenticado")
    count_before = sample("loyalty_request_seconds_count", method=PING)
    stub.Ping(pos.PingRequest(), metadata=md())
    stub.Ping(pos.PingRequest(), metadata=md())
    with pytest.raises(grpc.RpcError):
        stub.Ping(pos.PingRequest(), metadata=md("lp_vivo_" + "x" * 30))
    with pytest.raises(grpc.RpcError):
        stub.Ping(pos.PingRequest())
    assert sample("loyalty_requests_total", method=PING, codigo="ok") == ok_before + 2
    assert sample("loyalty_requests_total", method=PING, codigo="clave_invalida") == bad_before + 1
    assert sample("loyalty_requests_total", method=PING, codigo="no_autenticado") == anon_before + 1
    assert sample("loyalty_request_seconds_count", method=PING) == count_before + 4


def test_histogram_buckets_are_cumulative(stub, clave_id):
    stub.Ping(pos.PingRequest(), metadata=md())
    buckets = [
        (float(s.labels["le"]), s.value)
        for metric in REGISTRY.collect()
        if metric.name == "loyalty_request_seconds"
        for s in metric.samples
        if s.name.endswith("_bucket") and s.labels["method"] == PING
    ]
    assert len(buckets) >= 10
    assert buckets[-1][0] == float("inf")
    counts = [count for _, count in sorted(buckets)]
    assert counts == sorted(counts)
    assert counts[-1] == sample("loyalty_request_seconds_count", method=PING)
    assert sample("loyalty_request_seconds_sum", method=PING) > 0


def pool_series() -> dict[str, float]:
    """The pool series of one scrape of this process's registry (one reading of the pool:
    the collector yields them together)."""
    names = {name for name, _, _ in POOL_SERIES}
    return {
        sample.name: sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name in names
    }


def assert_consistent(series: dict[str, float]) -> None:
    assert set(series) == {name for name, _, _ in POOL_SERIES}, series
    assert all(value >= 0 for value in series.values()), series
    assert (
        series["loyalty_db_pool_connections"]
        == series["loyalty_db_pool_checked_out"] + series["loyalty_db_pool_idle"]
    ), series
    beyond = series["loyalty_db_pool_connections"] - series["loyalty_db_pool_size"]
    assert series["loyalty_db_pool_overflow_in_use"] == max(beyond, 0), series
    full = series["loyalty_db_pool_checked_out"] >= series["loyalty_db_pool_size"]
    assert series["loyalty_db_pool_saturated_workers"] == int(full), series


def wait_for_pool(expected: dict[str, float], seconds: float = 20) -> dict[str, float]:
    """The pool series once they show `expected` (each reading checked for consistency)."""
    deadline = time.monotonic() + seconds
    while True:
        series = pool_series()
        assert_consistent(series)
        if all(series[name] == value for name, value in expected.items()):
            return series
        assert time.monotonic() < deadline, (expected, series)
        time.sleep(0.02)


def test_pool_series_describe_the_servers_pool(stub, clave_id):
    stub.Ping(pos.PingRequest(), metadata=md())
    series = pool_series()
    assert_consistent(series)
    assert series["loyalty_db_pool_size"] == 4  # the engine's pool: max_workers
    assert series["loyalty_db_pool_max_overflow"] == 4  # store/db.py make_engine: = size
    assert series["loyalty_db_pool_checked_out"] == 0  # no call running
    assert series["loyalty_db_pool_idle"] >= 1  # the Ping's key lookup used one
    assert series["loyalty_db_pool_overflow_in_use"] == 0
    assert series["loyalty_db_pool_saturated_workers"] == 0
    # QueuePool.overflow() (negative until the pool has opened pool_size connections) is
    # not exported: overflow_in_use replaced it.
    assert REGISTRY.get_sample_value("loyalty_db_pool_overflow") is None
    assert REGISTRY.get_sample_value("loyalty_requests_in_flight") == 0


def test_pool_series_while_calls_hold_connections(db_url, stub, clave_id):
    """Four calls (the server's four threads) wait on a lock the test holds, each on its
    pooled connection: the pool is saturated; two more connections checked out of the
    server's engine are overflow. Every reading on the way is consistent."""
    engine = observability._pool_collector().engine  # the server's (the latest built)
    assert engine is not None
    wait_for_pool({"loyalty_db_pool_checked_out": 0})
    locker = psycopg.connect(db_url)
    calls: list[grpc.Future[pos.ResolveFanResponse]] = []
    extra: list[Connection] = []
    try:
        locker.execute("LOCK TABLE fans IN ACCESS EXCLUSIVE MODE")
        calls = [
            stub.ResolveFan.future(pos.ResolveFanRequest(fan=FAN_ID), metadata=md(), timeout=60)
            for _ in range(4)
        ]
        held = wait_for_pool({"loyalty_db_pool_checked_out": 4})
        assert held["loyalty_db_pool_size"] == 4
        assert held["loyalty_db_pool_idle"] == 0
        assert held["loyalty_db_pool_overflow_in_use"] == 0
        assert held["loyalty_db_pool_saturated_workers"] == 1
        assert REGISTRY.get_sample_value("loyalty_requests_in_flight") == 4
        extra = [engine.connect() for _ in range(2)]
        beyond = wait_for_pool({"loyalty_db_pool_checked_out": 6})
        assert beyond["loyalty_db_pool_connections"] == 6
        assert beyond["loyalty_db_pool_overflow_in_use"] == 2
        for conn in extra:
            conn.close()
        # Back in the pool (it has room while the calls hold theirs): still beyond the size.
        returned = wait_for_pool({"loyalty_db_pool_checked_out": 4})
        assert returned["loyalty_db_pool_idle"] == 2
        assert returned["loyalty_db_pool_overflow_in_use"] == 2
    finally:
        for conn in extra:
            conn.close()
        locker.rollback()
        locker.close()
    assert [call.result().data.fan.id for call in calls] == [FAN_ID] * 4
    # Returned: the pool keeps its size and closes the rest.
    after = wait_for_pool({"loyalty_db_pool_checked_out": 0})
    assert after["loyalty_db_pool_connections"] == 4
    assert after["loyalty_db_pool_idle"] == 4
    assert after["loyalty_db_pool_overflow_in_use"] == 0
    assert after["loyalty_db_pool_saturated_workers"] == 0


def test_the_request_id_comes_back_and_is_logged(stub, clave_id, captured):
    given = "req-" + uuid.uuid4().hex
    _, call = stub.Ping.with_call(pos.PingRequest(), metadata=md(request_id=given))
    assert trailing(call)[REQUEST_ID_KEY] == given
    # A native caller without one gets a fresh id, the same in the answer and the log.
    _, call = stub.Ping.with_call(pos.PingRequest(), metadata=md())
    made = trailing(call)[REQUEST_ID_KEY]
    assert isinstance(made, str)
    assert uuid.UUID(made)
    # An unusable one is replaced.
    _, call = stub.Ping.with_call(pos.PingRequest(), metadata=md(request_id="not an id; " * 20))
    assert uuid.UUID(str(trailing(call)[REQUEST_ID_KEY]))
    assert [line["request_id"] for line in captured.calls()][:2] == [given, made]


def test_errors_carry_the_request_id_and_keep_their_status(stub, clave_id, captured):
    given = "err-" + uuid.uuid4().hex
    with pytest.raises(grpc.RpcError) as caught:
        stub.ResolveFan(pos.ResolveFanRequest(fan="NOBODY123"), metadata=md(request_id=given))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(caught.value).reason == "fan_no_encontrado"
    meta = trailing(caught.value)
    assert meta[REQUEST_ID_KEY] == given
    assert "x-http-status" not in meta  # the envelope metadata is only for Envoy's calls
    [line] = captured.calls()
    assert (line["request_id"], line["codigo"], line["grpc_code"]) == (
        given,
        "fan_no_encontrado",
        "NOT_FOUND",
    )
    assert line["level"] == "INFO"


def test_one_json_line_per_call_without_personal_data(stub, clave_id, captured):
    importe = struct_pb2.Value(number_value=150)
    stub.RegisterTx(
        pos.RegisterTxRequest(
            id_externo=ID_EXTERNO, fan=CORREO, importe=importe, terminal=TERMINAL
        ),
        metadata=md(request_id="tx-1"),
    )
    stub.ResolveFan(pos.ResolveFanRequest(fan=FAN_ID), metadata=md(request_id="resolve-1"))
    stub.ResolveFan(pos.ResolveFanRequest(qr=QR), metadata=md(request_id="resolve-2"))
    with pytest.raises(grpc.RpcError):  # a conflict quotes nothing of the sale either
        stub.RegisterTx(
            pos.RegisterTxRequest(
                id_externo=ID_EXTERNO, fan=FAN_ID, importe=struct_pb2.Value(number_value=99)
            ),
            metadata=md(request_id="tx-2"),
        )
    lines = captured.calls()
    assert [line["request_id"] for line in lines] == ["tx-1", "resolve-1", "resolve-2", "tx-2"]
    assert [line["method"] for line in lines] == [TX, RESOLVE, RESOLVE, TX]
    assert [line["codigo"] for line in lines] == ["ok", "ok", "ok", "id_externo_en_conflicto"]
    for line in lines:
        assert line["programa"] == "obs"
        assert line["clave_id"] == clave_id
        assert line["modo"] == "vivo"
        assert isinstance(line["duration_ms"], float)
        assert set(line) == {
            "ts",
            "level",
            "logger",
            "msg",
            "pid",
            "request_id",
            "method",
            "codigo",
            "grpc_code",
            "duration_ms",
            "programa",
            "modo",
            "clave_id",
        }
    everything = "\n".join(captured.lines)
    for secret in (KEY, KEY[8:], FAN_ID, CORREO, NOMBRE, QR, ID_EXTERNO, TERMINAL):
        assert secret not in everything
    assert everything.count("\n") == len(captured.lines) - 1  # one line per record


def test_metrics_endpoint_in_one_process(db_url, stub, clave_id):
    stub.Ping(pos.PingRequest(), metadata=md())
    stop = metrics.serve_metrics("127.0.0.1", 0, db_url)
    try:
        response = httpx.get(f"http://127.0.0.1:{stop.port}/metrics", timeout=10)
    finally:
        stop()
    assert response.status_code == 200
    text = response.text
    assert f'loyalty_requests_total{{codigo="ok",method="{PING}"}}' in text
    assert "loyalty_request_seconds_bucket{" in text
    for name, _, _ in POOL_SERIES:
        assert f"\n{name} " in text
    assert "\nloyalty_db_pool_overflow " not in text
    assert "loyalty_database_up 1.0" in text
    # The sale of the test above waits in the wallet outbox (no sender runs here).
    fans = next(
        line for line in text.splitlines() if line.startswith("loyalty_wallet_outbox_fans ")
    )
    assert float(fans.split()[1]) >= 1
    assert "loyalty_wallet_outbox_oldest_seconds " in text
    stop()  # a second stop is harmless


def test_metrics_endpoint_reports_an_unreachable_database():
    port = free_port()  # nothing listens there
    stop = metrics.serve_metrics("127.0.0.1", 0, f"postgresql://x:y@127.0.0.1:{port}/nada")
    try:
        text = httpx.get(f"http://127.0.0.1:{stop.port}/metrics", timeout=20).text
    finally:
        stop()
    assert "loyalty_database_up 0.0" in text
    assert "loyalty_wallet_outbox_fans" not in text


WORKER = textwrap.dedent("""
    import sys
    from loyalty_grpc.api.observability import REQUESTS, _gauges
    for _ in range(int(sys.argv[1])):
        REQUESTS.labels("loyalty.v1.PosService/Ping", "ok").inc()
    _gauges().in_flight.inc()
""")


def test_metrics_endpoint_aggregates_worker_processes(
    tmp_path: Path, db_url, monkeypatch: pytest.MonkeyPatch
):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"stale")
    # prepare() changes this process's environment and metric storage: undone afterwards.
    monkeypatch.setenv(metrics.MULTIPROC_ENV, "unset-after-the-test")
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    metrics.prepare(directory)
    assert os.environ[metrics.MULTIPROC_ENV] == str(directory.resolve())
    assert not (directory / "counter_999999.db").exists()
    pids = []
    for count in (2, 3):
        worker = subprocess.run(
            [sys.executable, "-c", WORKER + "import os; print(os.getpid())", str(count)],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ.copy(),
        )
        pids.append(int(worker.stdout))
    stop = metrics.serve_metrics("127.0.0.1", 0, db_url)
    try:
        url = f"http://127.0.0.1:{stop.port}/metrics"
        text = httpx.get(url, timeout=10).text
        assert f'loyalty_requests_total{{codigo="ok",method="{PING}"}} 5.0' in text
        assert "loyalty_requests_in_flight 2.0" in text
        assert "loyalty_database_up 1.0" in text
        metrics.mark_worker_dead(pids[0])
        text = httpx.get(url, timeout=10).text
        assert "loyalty_requests_in_flight 1.0" in text  # live gauges forget the dead
        assert f'loyalty_requests_total{{codigo="ok",method="{PING}"}} 5.0' in text
    finally:
        stop()


POOL_WORKER = textwrap.dedent("""
    import os, sys
    from loyalty_grpc.api.observability import PoolGauges
    from loyalty_grpc.store.db import make_engine
    url, size, hold, returned = sys.argv[1], *map(int, sys.argv[2:])
    engine = make_engine(url, pool_size=size)
    held = [engine.connect() for _ in range(hold + returned)]
    for conn in held[hold:]:
        conn.close()
    PoolGauges(engine)  # multiprocess mode: writes the series into this worker's files
    print(os.getpid())
""")


def scraped_pool(url: str) -> dict[str, float]:
    text = httpx.get(url, timeout=10).text
    names = {name for name, _, _ in POOL_SERIES}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in names
    }


def test_pool_series_are_summed_over_live_workers(
    tmp_path: Path, db_url, monkeypatch: pytest.MonkeyPatch
):
    """Two workers' pools: (size 2, 3 checked out: one beyond the size, saturated) and
    (size 3, 1 checked out, 1 idle). Each series is the sum over the live workers, so
    overflow_in_use counts the first worker's extra connection although the totals of
    connections and sizes are equal; a worker that exited stops counting."""
    directory = tmp_path / "prometheus"
    monkeypatch.setenv(metrics.MULTIPROC_ENV, "unset-after-the-test")
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    metrics.prepare(directory)
    pids = []
    for size, hold, returned in ((2, 3, 0), (3, 1, 1)):
        worker = subprocess.run(
            [sys.executable, "-c", POOL_WORKER, db_url, str(size), str(hold), str(returned)],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ.copy(),
        )
        pids.append(int(worker.stdout))
    stop = metrics.serve_metrics("127.0.0.1", 0, db_url)
    try:
        url = f"http://127.0.0.1:{stop.port}/metrics"
        both = scraped_pool(url)
        assert both == {
            "loyalty_db_pool_size": 5.0,
            "loyalty_db_pool_max_overflow": 5.0,
            "loyalty_db_pool_connections": 5.0,
            "loyalty_db_pool_checked_out": 4.0,
            "loyalty_db_pool_idle": 1.0,
            "loyalty_db_pool_overflow_in_use": 1.0,
            "loyalty_db_pool_saturated_workers": 1.0,
        }
        metrics.mark_worker_dead(pids[0])
        second = scraped_pool(url)
        assert second == {
            "loyalty_db_pool_size": 3.0,
            "loyalty_db_pool_max_overflow": 3.0,
            "loyalty_db_pool_connections": 2.0,
            "loyalty_db_pool_checked_out": 1.0,
            "loyalty_db_pool_idle": 1.0,
            "loyalty_db_pool_overflow_in_use": 0.0,
            "loyalty_db_pool_saturated_workers": 0.0,
        }
    finally:
        stop()
