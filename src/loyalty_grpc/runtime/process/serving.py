"""The serving parent that `loyalty serve` and `loyalty up` share (`serving()`): worker
processes on one port, the wallet sender (exactly one per parent, whatever the worker
count, and untouched by a worker restart) and the supervision loop
(runtime/process/supervision.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime import metrics, wallet
from loyalty_grpc.runtime.process.process_file import ProcessFile, live_writer
from loyalty_grpc.runtime.process.supervision import Child, supervise
from loyalty_grpc.runtime.process.workers import WorkerPool
from loyalty_grpc.runtime.settings import ConfigError, Settings
from loyalty_grpc.store.db import make_engine

# The wallet sender's pool in the supervising process (runtime/wallet.py: one thread).
SENDER_POOL_SIZE = 2


def server_settings(settings: Settings, *, database_url: str, admin_token: str) -> ServerSettings:
    tls = settings.grpc_tls()  # checked before anything starts
    return ServerSettings(
        tls_cert=str(tls.cert) if tls is not None else None,
        tls_key=str(tls.key) if tls is not None else None,
        tls_ca=str(tls.ca) if tls is not None else None,
        database_url=database_url,
        admin_token=admin_token,
        host=settings.listen_host,
        port=settings.grpc_port,
        key_cache_seconds=settings.key_cache_seconds,
        failed_key_checks_per_minute=settings.failed_key_checks_per_minute,
        rate_limit_per_minute=settings.rate_limit_per_minute,
        rate_limit_batch=settings.rate_limit_batch,
    )


@dataclass
class Supervisor:
    """What `serving()` runs: the workers, any other child added (`loyalty up`'s Envoy),
    and the processes file `loyalty status` reads."""

    pool: WorkerPool
    table: ProcessFile
    others: list[Child] = field(default_factory=list)

    def add(self, child: Child) -> None:
        self.others.append(child)
        self.table.children = [*self.pool.children, *self.others]
        self.table.write()

    def run(self, stop: threading.Event) -> None:
        """Until SIGINT/SIGTERM, restart what dies (runtime/process/supervision.py)."""
        supervise(stop, [self.pool.check, *(child.tick for child in self.others)])


@contextlib.contextmanager
def serving(
    settings: Settings, server: ServerSettings, *, command: str, share_port: bool = False
) -> Iterator[Supervisor]:
    """The workers serving, /metrics (summed over the workers) and the wallet sender
    running; on exit the sender and /metrics stop, then the workers (a rolling stop: all
    but one hand over to the last, then it stops; runtime/process/workers.py)."""
    running = live_writer(settings.data_dir)
    if running is not None:
        raise ConfigError(
            f"another `{running.command}` (pid {running.pid}) runs from {settings.data_dir}: "
            "give this one its own --data-dir (and --metrics-port)"
        )
    metrics_dir = settings.data_dir / "metrics"
    metrics.prepare(metrics_dir)  # before the workers start
    table = ProcessFile.in_dir(settings.data_dir, command)
    pool = WorkerPool(
        server,
        settings.workers,
        log_level=settings.log_level,
        log_format=settings.log_format_for(command),
        on_exit=metrics.mark_worker_dead,
        on_restart=metrics.count_restart,
        on_change=table.write,
        share_port=share_port,
        liveness=settings.liveness,
    )
    # The wallet sender's own connections, named in pg_stat_activity.
    engine = make_engine(wallet.sender_url(server.database_url), pool_size=SENDER_POOL_SIZE)
    stop_metrics: Callable[[], None] | None = None
    sender = None
    try:
        pool.start()
        table.children = list(pool.children)
        table.write()
        if settings.metrics_port:
            stop_metrics = metrics.serve_metrics(
                server.host, settings.metrics_port, server.database_url
            )
        sender = wallet.start_sender(engine, settings.wallet)
        yield Supervisor(pool, table)
    finally:
        if sender is not None:
            sender.stop()
        if stop_metrics is not None:
            stop_metrics()
        pool.stop()
        engine.dispose()
        metrics.release(metrics_dir)
        table.remove()
