"""`loyalty up` (everything, one command), `loyalty serve` and `loyalty migrate`."""

from __future__ import annotations

import logging
from pathlib import Path

from loyalty_grpc.runtime import envoy, metrics
from loyalty_grpc.runtime.admin_token import ensure_admin_token
from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.demo import demo_lines, load_demo
from loyalty_grpc.runtime.postgres import Database, open_database
from loyalty_grpc.runtime.serve import serve, server_settings, serving
from loyalty_grpc.runtime.settings import UP, ConfigError, Settings
from loyalty_grpc.runtime.signals import stop_event
from loyalty_grpc.store import migrate

log = logging.getLogger(__name__)


def _admin_token(settings: Settings) -> str:
    return settings.admin_token or ensure_admin_token(settings.data_dir)


def migrate_command(data_dir: Path) -> int:
    db = open_database(data_dir)
    try:
        migrate.upgrade(db.url)
        say(f"database at revision {migrate.current(db.url)}")
    finally:
        db.stop()
    return 0


def serve_command(settings: Settings) -> int:
    if not settings.database_url:
        raise ConfigError(
            f"`{command('serve')}` needs LOYALTY_DATABASE_URL (or use `{command('up')}`)"
        )
    return serve(settings, database_url=settings.database_url, admin_token=_admin_token(settings))


def up(settings: Settings, *, demo: bool) -> int:
    stop = stop_event()
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    admin_token = _admin_token(settings)
    db = open_database(data_dir)
    try:
        migrate.upgrade(db.url)
        demo_banner = demo_lines(load_demo(db.url)) if demo else []
        server = server_settings(settings, command=UP, database_url=db.url, admin_token=admin_token)
        with serving(settings, server, command=UP) as supervisor:
            proxy = envoy.EnvoyProcess.start(
                http_port=settings.http_port,
                upstream_host=_connect_host(server.host),
                upstream_port=supervisor.pool.port,
                work_dir=data_dir / "envoy",
            )
            try:
                supervisor.add(
                    envoy.supervised(
                        proxy, on_restart=metrics.count_restart, on_change=supervisor.table.write
                    )
                )
                _print_banner(
                    http_port=settings.http_port,
                    grpc_host=server.host,
                    grpc_port=supervisor.pool.port,
                    workers=settings.workers,
                    data_dir=data_dir,
                    db=db,
                    demo=demo_banner,
                )
                supervisor.run(stop)
            finally:
                proxy.stop()  # HTTP stops first; then the sender and the workers, one by one
    finally:
        db.stop()
    say("stopped")
    return 0


def _connect_host(bind_host: str) -> str:
    return "127.0.0.1" if bind_host in ("0.0.0.0", "", "::") else bind_host  # noqa: S104


def _print_banner(
    *,
    http_port: int,
    grpc_host: str,
    grpc_port: int,
    workers: int,
    data_dir: Path,
    db: Database,
    demo: list[str],
) -> None:
    where = (
        "embedded PostgreSQL in " + str(data_dir / "pgdata")
        if db.embedded
        else "LOYALTY_DATABASE_URL"
    )
    lines = [
        f"loyalty is up: HTTP API http://127.0.0.1:{http_port}/api/v1  "
        f"gRPC {grpc_host}:{grpc_port} ({workers} workers)",
        f"database: {where}",
        f"admin token: LOYALTY_ADMIN_TOKEN or {data_dir / 'admin_token'}",
    ]
    lines += demo
    lines.append("Ctrl-C stops everything.")
    say("\n".join(lines))
