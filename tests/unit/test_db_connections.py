"""The connection budget of docs/deployment.md (runtime/db_connections.py) is what the
code opens: each engine's pool and overflow, the workers' engines sized to their threads;
and the table of `max_connections` in the docs is the one the module computes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.pool import QueuePool

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime import db_connections
from loyalty_grpc.runtime.db_connections import (
    SUPERUSER_RESERVED,
    max_connections,
    serve_connections,
    worker_connections,
)
from loyalty_grpc.store.db import engine_connections, make_engine

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql://loyalty@db.invalid:5432/loyalty"  # never connected to
WORKERS = (1, 2, 4, 8)


@pytest.mark.parametrize("pool_size", [1, 2, 16])
def test_an_engine_opens_at_most_its_pool_and_as_much_overflow(pool_size: int):
    engine = make_engine(URL, pool_size=pool_size)
    try:
        pool = engine.pool
        assert isinstance(pool, QueuePool)
        assert pool.size() + pool._max_overflow == engine_connections(pool_size)
    finally:
        engine.dispose()


def test_a_worker_is_sized_to_its_threads():
    """api/server.py: `make_engine(..., pool_size=settings.max_workers)`."""
    source = (ROOT / "src/loyalty_grpc/api/server.py").read_text(encoding="utf-8")
    assert "make_engine(settings.database_url, pool_size=settings.max_workers)" in source
    assert worker_connections() == engine_connections(ServerSettings.max_workers)


def test_the_other_engines_use_the_budget_constants():
    """The sender, /metrics and status open their engines with the module's figures."""
    sources = {
        name: (ROOT / "src/loyalty_grpc/runtime" / name).read_text(encoding="utf-8")
        for name in ("process/serving.py", "metrics.py", "cli/status.py")
    }
    assert "pool_size=SENDER_POOL_SIZE" in sources["process/serving.py"]
    assert "pool_size=METRICS_CONNECTIONS // 2" in sources["metrics.py"]
    assert "max_overflow=METRICS_CONNECTIONS // 2" in sources["metrics.py"]
    assert "pool_size=STATUS_POOL_SIZE" in sources["cli/status.py"]
    assert db_connections.METRICS_CONNECTIONS % 2 == 0


def test_the_sums():
    assert serve_connections(2) == 2 * worker_connections() + engine_connections(2) + 2
    assert max_connections(2, serves=2) == 2 * serve_connections(2) + 3 + 1 + SUPERUSER_RESERVED


def budget_table() -> str:
    """The docs' table, as the module computes it."""
    rows = [
        "| `LOYALTY_WORKERS` | a `serve` opens at most | `max_connections`, one `serve` | "
        "two `serve` (an upgrade's switch-over, or two hosts) |",
        "|---|---|---|---|",
    ]
    rows += [
        f"| {workers} | {serve_connections(workers)} | {max_connections(workers)} | "
        f"{max_connections(workers, serves=2)} |"
        for workers in WORKERS
    ]
    return "\n".join(rows)


def test_the_docs_table_is_the_computed_one():
    text = (ROOT / "docs/deployment.md").read_text(encoding="utf-8")
    assert budget_table() in text, budget_table()
    # And the figures of the prose around it.
    prose = " ".join(text.split())
    for figure in (
        f"one connection per gRPC thread ({ServerSettings.max_workers})",
        f"so {worker_connections()} per worker process",
        f"its wallet sender (up to {engine_connections(db_connections.SENDER_POOL_SIZE)})",
        f"`/metrics` (up to {db_connections.METRICS_CONNECTIONS})",
        "`status` and `migrate` need up to "
        f"{db_connections.STATUS_CONNECTIONS + db_connections.MIGRATE_CONNECTIONS} more",
        f"PostgreSQL keeps {SUPERUSER_RESERVED} (`superuser_reserved_connections`)",
    ):
        assert figure in prose, figure
