"""api/call_metrics.py: counted per thread and flushed, the metrics say exactly what
updating them at once says (the worker processes' files: test_observability.py)."""

from __future__ import annotations

import random
import threading
from functools import cache

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loyalty_grpc.api.call_metrics import CallMetrics
from loyalty_grpc.api.observability import LATENCY_BUCKETS

METHODS = ("loyalty.v1.PosService/Ping", "loyalty.v1.PosService/RegisterTx")
CODIGOS = ("ok", "clave_invalida", "demasiadas_llamadas")


def metrics(*, batched: bool) -> tuple[CallMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    requests = Counter("r", "r", ["method", "codigo"], registry=registry)
    latency = Histogram("l", "l", ["method"], buckets=LATENCY_BUCKETS, registry=registry)
    in_flight = Gauge("f", "f", registry=registry)
    call_metrics = CallMetrics(
        cache(requests.labels),
        cache(latency.labels),
        in_flight,
        LATENCY_BUCKETS,
        batched=batched,
        flush_every=None,
    )
    return call_metrics, registry


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): round(s.value, 6)
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def calls(seed: int) -> list[tuple[str, str, float]]:
    pick = random.Random(seed)
    bounds = (*LATENCY_BUCKETS, 20.0)
    return [
        (
            pick.choice(METHODS),
            pick.choice(CODIGOS),
            # Exactly on a bound half of the time: a bound belongs to its bucket.
            pick.choice(bounds) if pick.random() < 0.5 else pick.uniform(0, 16),
        )
        for _ in range(2000)
    ]


def test_batched_counts_from_many_threads_equal_direct_updates() -> None:
    batched, batched_registry = metrics(batched=True)
    direct, direct_registry = metrics(batched=False)
    per_thread = [calls(seed) for seed in range(8)]

    def run(made: list[tuple[str, str, float]]) -> None:
        for method, codigo, seconds in made:
            batched.started()
            batched.finished(method, codigo, seconds)

    threads = [threading.Thread(target=run, args=(made,)) for made in per_thread]
    for thread in threads:
        thread.start()
    for index, thread in enumerate(threads):
        if index == 4:
            batched.flush()  # a flush while threads count: nothing counted twice or lost
        thread.join()
    batched.flush()
    for made in per_thread:
        for method, codigo, seconds in made:
            direct.started()
            direct.finished(method, codigo, seconds)
    assert samples(batched_registry) == samples(direct_registry)
    batched.flush()  # nothing new: nothing added
    assert samples(batched_registry) == samples(direct_registry)


def test_the_in_flight_gauge_is_set_at_each_flush() -> None:
    batched, registry = metrics(batched=True)
    for _ in range(3):
        batched.started()
    batched.finished(METHODS[0], "ok", 0.001)
    assert registry.get_sample_value("f") == 0  # not yet flushed
    batched.flush()
    assert registry.get_sample_value("f") == 2
    thread = threading.Thread(target=batched.started)
    thread.start()
    thread.join()
    batched.flush()
    assert registry.get_sample_value("f") == 3
