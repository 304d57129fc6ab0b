"""How many PostgreSQL connections the service may hold at once, from its settings: what
the server's `max_connections` must leave room for (docs/deployment.md "PostgreSQL for
the service"). Every figure is the one the code opens with (each engine's pool and
overflow, `store/db.engine_connections`); tests/unit/test_db_connections.py ties them.

- each gRPC worker process: its engine, sized to its threads (`ServerSettings.max_workers`);
- each `serve` (or `up`): its workers, the wallet sender's engine, and /metrics' engine;
- beside them, an operator's commands: `status` (its engine and the schema check's
  connection) and `migrate` (one connection);
- PostgreSQL keeps `superuser_reserved_connections` (3 by default) of max_connections for
  superusers: the service's role never gets those.
"""

from __future__ import annotations

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.store.db import engine_connections

# The wallet sender's engine in each `serve` (runtime/process/serving.py).
SENDER_POOL_SIZE = 2
# /metrics' engine in each `serve`: a pool of half, as much overflow (runtime/metrics.py).
METRICS_CONNECTIONS = 2
# `loyalty status`'s engine, and the one connection of its schema check (store/migrate.py).
STATUS_POOL_SIZE = 1
STATUS_CONNECTIONS = engine_connections(STATUS_POOL_SIZE) + 1
MIGRATE_CONNECTIONS = 1
# PostgreSQL's default superuser_reserved_connections.
SUPERUSER_RESERVED = 3


def worker_connections(threads: int = ServerSettings.max_workers) -> int:
    """One worker process: its engine's pool is its thread count."""
    return engine_connections(threads)


def serve_connections(workers: int) -> int:
    """One `serve` (or `up`) with `workers` worker processes."""
    return (
        workers * worker_connections() + engine_connections(SENDER_POOL_SIZE) + METRICS_CONNECTIONS
    )


def max_connections(workers: int, serves: int = 1) -> int:
    """The least `max_connections` for `serves` `serve` processes (all hosts, and both
    slots while an upgrade switches over) of `workers` workers each, with room for one
    `status` and one `migrate` and PostgreSQL's superuser reserve."""
    return (
        serves * serve_connections(workers)
        + STATUS_CONNECTIONS
        + MIGRATE_CONNECTIONS
        + SUPERUSER_RESERVED
    )


__all__ = [
    "METRICS_CONNECTIONS",
    "MIGRATE_CONNECTIONS",
    "SENDER_POOL_SIZE",
    "STATUS_CONNECTIONS",
    "STATUS_POOL_SIZE",
    "SUPERUSER_RESERVED",
    "max_connections",
    "serve_connections",
    "worker_connections",
]
