"""Every counter is on /metrics from the first scrape, at 0 (issue 12): a fresh
`loyalty serve --workers 2` (real PostgreSQL, the workers writing to the parent's
PROMETHEUS_MULTIPROC_DIR), scraped before any call.

Which families must be there is read from prometheus_client's registry, not written here:
every Counter and Histogram that the modules of loyalty_grpc using prometheus_client
register when imported. Each must expose samples, all 0, and an unlabelled one its plain
`_total` at 0. The exposition must also be what `promtool check metrics` accepts: it is
parsed with prometheus_client's parser and checked for what promtool checks (HELP and TYPE
once per family, before its samples, families not interleaved, valid names, no duplicate
series, counters named `_total`, histograms with a `+Inf` bucket equal to `_count`).
"""

from __future__ import annotations

import importlib
import json
import math
import re
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

import loyalty_grpc
from loyalty_grpc.api import observability
from loyalty_grpc.api.interceptors import POS_SERVICE
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from tests.e2e.processes import Running, loyalty_env
from tests.support import ADMIN_TOKEN, free_port

WORKERS = 2
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Family:
    name: str  # as the parser names it (a counter without `_total`)
    kind: str  # "counter", "histogram"
    labelled: bool


def name_of(metric: Counter | Histogram) -> str:
    """The family name the parser gives `metric` (a counter's without `_total`)."""
    (described,) = metric.describe()
    return described.name


def registered_families() -> list[Family]:
    """Every Counter and Histogram registered by the loyalty_grpc modules that use
    prometheus_client (imported here, so that they register)."""
    source = Path(loyalty_grpc.__file__).parent
    for path in sorted(source.rglob("*.py")):
        if "prometheus_client" in path.read_text(encoding="utf-8"):
            relative = path.relative_to(source.parent).with_suffix("")
            importlib.import_module(".".join(relative.parts))
    found = []
    for collector in list(REGISTRY._collector_to_names):
        if isinstance(collector, Counter | Histogram):
            (described,) = collector.describe()
            found.append(Family(described.name, described.type, bool(collector._labelnames)))
    return found


@pytest.fixture(scope="module")
def exposition(
    create_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """/metrics of a `loyalty serve` whose workers are up and that answered no call."""
    url = create_database()
    upgrade(url)
    engine = make_engine(url, pool_size=1)
    try:
        run_in_uow(
            engine,
            apply_fixture,
            json.dumps(
                {
                    "programas": [
                        {
                            "id": "cero",
                            "nombre": "Club Cero",
                            "tasa_puntos": "0.1",
                            "qr_url": "https://cero.example/fan",
                            "claves": [
                                {
                                    "clave": "lp_vivo_" + secrets.token_hex(16),
                                    "integracion": "Caja",
                                    "permisos": [],
                                }
                            ],
                            "fans": [],
                        }
                    ]
                }
            ),
        )
    finally:
        engine.dispose()
    metrics_port = free_port()
    serve = Running(
        [
            "serve",
            "--grpc-host",
            "127.0.0.1",
            "--grpc-port",
            str(free_port()),
            "--workers",
            str(WORKERS),
            "--metrics-port",
            str(metrics_port),
        ],
        tmp_path_factory.mktemp("cero"),
        loyalty_env(
            LOYALTY_DATABASE_URL=url, LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN, LOYALTY_LOG_FORMAT="json"
        ),
    )
    try:
        serve.wait_for_workers(WORKERS)
        deadline = time.monotonic() + 30
        while True:  # the parent serves /metrics once its workers started
            try:
                page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
        yield page.text
    finally:
        if serve.proc.poll() is None:
            serve.stop()


def test_every_registered_counter_and_histogram_is_there_at_zero(exposition: str) -> None:
    expected = registered_families()
    assert expected  # the registry was read
    rate_limited = name_of(observability.RATE_LIMITED)
    assert rate_limited in {family.name for family in expected}  # the one the issue names
    scraped = {family.name: family for family in text_string_to_metric_families(exposition)}
    for family in expected:
        assert family.name in scraped, f"{family.name} is not on /metrics before the first call"
        got = scraped[family.name]
        assert got.type == family.kind
        samples = [s for s in got.samples if not s.name.endswith("_created")]
        assert samples, f"{family.name} has no sample before the first call"
        assert all(s.value == 0 for s in samples), [s for s in samples if s.value != 0]
        if family.kind == "counter" and not family.labelled:
            assert Sample(family.name + "_total", {}, 0.0) in samples


def test_labelled_counters_start_with_every_known_label_value(exposition: str) -> None:
    """The call counters: each method the descriptors define, with "ok" and each codigo
    of the catalogue it can answer; the rate limit for each PosService method."""
    scraped = {family.name: family for family in text_string_to_metric_families(exposition)}
    methods = observability.known_methods()
    requests = {
        (s.labels["method"], s.labels["codigo"])
        for s in scraped[name_of(observability.REQUESTS)].samples
    }
    assert requests == {
        (method, codigo)
        for method, service in methods.items()
        for codigo in observability.known_outcomes(service)
    }
    limited = {s.labels["method"] for s in scraped[name_of(observability.RATE_LIMITED)].samples}
    assert limited == {m for m, service in methods.items() if service == POS_SERVICE}
    latency = {s.labels["method"] for s in scraped[name_of(observability.LATENCY)].samples}
    assert latency == set(methods)


def test_pool_series_of_the_workers(exposition: str) -> None:
    """The database pool of every worker, summed (multiprocess mode livesum): every series
    of api/observability.py POOL_SERIES, none negative (QueuePool.overflow(), negative until
    a pool has opened pool_size connections, is not exported), and consistent."""
    names = {name for name, _, _ in observability.POOL_SERIES}
    pool = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name in names
    }
    assert set(pool) == names
    assert all(value >= 0 for value in pool.values()), pool
    assert "loyalty_db_pool_overflow" not in {
        family.name for family in text_string_to_metric_families(exposition)
    }
    size = pool["loyalty_db_pool_size"]
    assert size >= WORKERS, pool
    assert size % WORKERS == 0, pool  # the workers' equal pools, summed
    assert pool["loyalty_db_pool_max_overflow"] == size, pool  # store/db.py make_engine
    assert (
        pool["loyalty_db_pool_connections"]
        == pool["loyalty_db_pool_checked_out"] + pool["loyalty_db_pool_idle"]
    ), pool
    assert pool["loyalty_db_pool_connections"] <= size, pool  # no call yet: no overflow
    assert pool["loyalty_db_pool_overflow_in_use"] == 0, pool
    assert pool["loyalty_db_pool_saturated_workers"] == 0, pool


def test_the_exposition_is_valid(exposition: str) -> None:
    families = list(text_string_to_metric_families(exposition))  # raises on bad syntax
    assert families
    check_like_promtool(exposition)
    for family in families:
        assert _NAME.fullmatch(family.name), family.name
        assert family.documentation, f"{family.name} has no HELP"
        assert family.type in {"counter", "gauge", "histogram", "summary", "untyped"}
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in family.samples:
            assert _NAME.fullmatch(sample.name), sample.name
            for label in sample.labels:
                assert _LABEL.fullmatch(label), label
                assert not label.startswith("__"), label
            series = (sample.name, tuple(sorted(sample.labels.items())))
            assert series not in seen, f"duplicate series {series}"
            seen.add(series)
            assert not math.isnan(sample.value), series
            if family.type == "counter":
                assert sample.name in (family.name + "_total", family.name + "_created")
                assert sample.value >= 0
            if family.type == "histogram":
                rest = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                if sample.name.endswith("_bucket"):
                    buckets[rest].append((float(sample.labels["le"]), sample.value))
                elif sample.name.endswith("_count"):
                    counts[rest] = sample.value
        for rest, points in buckets.items():
            assert points == sorted(points), (family.name, rest)  # cumulative, le ascending
            assert [c for _, c in points] == sorted(c for _, c in points)
            assert points[-1][0] == math.inf
            assert points[-1][1] == counts[rest]


# The sample names of a family declared `# TYPE <name> <type>` in the text format 0.0.4.
_SUFFIXES = {
    "counter": ("",),  # declared with its `_total` name
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
}


def check_like_promtool(text: str) -> None:
    """The text format's rules promtool enforces beyond the parser: one HELP and one TYPE
    per family, before its samples; a family's samples together (not interleaved with
    another family's), named as its type says."""
    declared: dict[str, set[str]] = defaultdict(set)
    types: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            _, kind, name, rest = line.split(" ", 3)
            assert kind in ("HELP", "TYPE"), line
            assert kind not in declared[name], f"{kind} twice for {name}"
            if name != current:
                assert not declared[name], f"{name} declared in two places"
            declared[name].add(kind)
            if kind == "TYPE":
                types[name] = rest
            current = name
            continue
        sample = re.split(r"[{ ]", line, maxsplit=1)[0]
        assert current is not None, f"sample {sample} before any HELP/TYPE"
        assert declared[current] == {"HELP", "TYPE"}, f"{current}: HELP and TYPE first"
        allowed = {current + suffix for suffix in _SUFFIXES[types[current]]}
        assert sample in allowed, f"sample {sample} outside its family {current}"
