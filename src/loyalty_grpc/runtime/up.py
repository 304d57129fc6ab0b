"""`loyalty up` (everything, one command), `loyalty serve` and `loyalty migrate`."""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path

from loyalty_grpc.runtime import envoy, metrics
from loyalty_grpc.runtime.admin_token import ensure_admin_token
from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import Database, open_database
from loyalty_grpc.runtime.serve import serve, server_settings, serving
from loyalty_grpc.runtime.settings import UP, ConfigError, Settings
from loyalty_grpc.runtime.signals import stop_event
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine

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
        raise ConfigError("`loyalty serve` needs LOYALTY_DATABASE_URL (or use `loyalty up`)")
    return serve(settings, database_url=settings.database_url, admin_token=_admin_token(settings))


def _load_demo(db: Database) -> list[dict[str, object]]:
    from loyalty_grpc.services.fixtures import apply_fixture

    text = (resources.files("loyalty_grpc.runtime") / "demo_fixture.json").read_text()
    engine = make_engine(db.url, pool_size=1)
    try:
        apply_fixture(engine, text)
    finally:
        engine.dispose()
    document = json.loads(text)
    return [
        dict(clave, programa=programa["id"])
        for programa in document["programas"]
        for clave in programa["claves"]
    ]


def up(settings: Settings, *, demo: bool) -> int:
    stop = stop_event()
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    admin_token = _admin_token(settings)
    db = open_database(data_dir)
    try:
        migrate.upgrade(db.url)
        demo_keys = _load_demo(db) if demo else []
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
                    demo_keys=demo_keys,
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
    demo_keys: list[dict[str, object]],
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
    for key in demo_keys:
        permisos = ", ".join(str(p) for p in key.get("permisos", [])) or "(none)"  # type: ignore[attr-defined]
        lines.append(
            f"demo key [{key['programa']}] {key['integracion']}: {key['clave']}  "
            f"permisos: {permisos}"
        )
    lines.append("Ctrl-C stops everything.")
    say("\n".join(lines))
