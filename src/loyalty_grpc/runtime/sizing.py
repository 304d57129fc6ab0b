"""How a deployment sizes itself on a machine of N cores, from the defaults the commands
use: Envoy's worker threads, the gRPC worker processes, each worker's database pool, and
the most database connections one `serve` (or `up`) can open. The table of docs/sizing.md
is generated from here (scripts/gen_docs.py), so it follows the code."""

from __future__ import annotations

from dataclasses import dataclass

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime.metrics import METRICS_CONNECTIONS
from loyalty_grpc.runtime.process.serving import SENDER_POOL_SIZE
from loyalty_grpc.runtime.settings import default_gateway_threads, default_workers
from loyalty_grpc.store.db import most_connections

# Connections to leave free beyond the servers' for the operator's own: `loyalty migrate`,
# `admin`, `status`, `backup`, psql, a monitoring agent. PostgreSQL keeps its
# superuser_reserved_connections (3) apart from max_connections' count on top of these.
OPERATOR_CONNECTIONS = 10
CORE_COUNTS = (2, 4, 8, 16, 32, 64)


def parent_connections() -> int:
    """The supervising process's own: the wallet sender's pool and the /metrics endpoint's."""
    return most_connections(SENDER_POOL_SIZE) + METRICS_CONNECTIONS


def worker_connections(grpc_threads: int = ServerSettings.max_workers) -> int:
    """A worker's pool: as large as its gRPC threads, with as much again as overflow."""
    return most_connections(grpc_threads)


def serve_connections(workers: int, grpc_threads: int = ServerSettings.max_workers) -> int:
    """The most connections one `serve` or `up` with `workers` workers opens."""
    return workers * worker_connections(grpc_threads) + parent_connections()


@dataclass(frozen=True)
class Size:
    cores: int
    gateway_threads: int
    workers: int
    grpc_threads: int
    worker_connections: int
    serve_connections: int
    max_connections: int  # PostgreSQL's, at least, for one serve on this host


def size_for(cores: int) -> Size:
    workers = default_workers(cores)
    serve = serve_connections(workers)
    return Size(
        cores=cores,
        gateway_threads=default_gateway_threads(cores),
        workers=workers,
        grpc_threads=ServerSettings.max_workers,
        worker_connections=worker_connections(),
        serve_connections=serve,
        max_connections=serve + OPERATOR_CONNECTIONS,
    )


def sizing_table() -> str:
    rows = [
        "| cores | gateway threads (`LOYALTY_GATEWAY_THREADS`) | gRPC workers "
        "(`LOYALTY_WORKERS`) | gRPC threads per worker | database connections per worker "
        "(pool + overflow) | most connections of one `serve` | PostgreSQL `max_connections`, "
        "at least |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in map(size_for, CORE_COUNTS):
        rows.append(
            f"| {size.cores} | {size.gateway_threads} | {size.workers} | {size.grpc_threads} "
            f"| {size.worker_connections} | {size.serve_connections} | {size.max_connections} |"
        )
    return "\n".join(rows)
