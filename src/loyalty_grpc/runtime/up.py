"""`loyalty up` (everything, one command), `loyalty serve` and `loyalty migrate`."""

from __future__ import annotations

import json
import logging
import os
import threading
from importlib import resources
from pathlib import Path

from loyalty_grpc.api.server import ServerSettings, build_server
from loyalty_grpc.runtime import envoy, wallet
from loyalty_grpc.runtime.admin_token import ensure_admin_token
from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import Database, open_database
from loyalty_grpc.runtime.serve import serve
from loyalty_grpc.runtime.signals import stop_event
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine

log = logging.getLogger(__name__)

# How often `up` restarts an Envoy that died, before giving up.
ENVOY_RESTARTS = 5


def _admin_token(data_dir: Path) -> str:
    return os.environ.get("LOYALTY_ADMIN_TOKEN") or ensure_admin_token(data_dir)


def migrate_command(data_dir: Path) -> int:
    db = open_database(data_dir)
    try:
        migrate.upgrade(db.url)
        say(f"database at revision {migrate.current(db.url)}")
    finally:
        db.stop()
    return 0


def serve_command(*, grpc_host: str, grpc_port: int, data_dir: Path) -> int:
    url = os.environ.get("LOYALTY_DATABASE_URL")
    if not url:
        raise SystemExit("error: `loyalty serve` needs LOYALTY_DATABASE_URL (or use `loyalty up`)")
    return serve(ServerSettings(database_url=url, admin_token=_admin_token(data_dir),
                                host=grpc_host, port=grpc_port))


def _load_demo(db: Database) -> list[dict[str, object]]:
    from loyalty_grpc.services.fixtures import apply_fixture

    text = (resources.files("loyalty_grpc.runtime") / "demo_fixture.json").read_text()
    engine = make_engine(db.url, pool_size=1)
    try:
        apply_fixture(engine, text)
    finally:
        engine.dispose()
    document = json.loads(text)
    return [dict(clave, programa=programa["id"]) for programa in document["programas"]
            for clave in programa["claves"]]


def up(*, http_port: int, grpc_port: int, grpc_host: str, data_dir: Path, demo: bool) -> int:
    wallet_settings = wallet.load_settings()
    stop = stop_event()
    data_dir.mkdir(parents=True, exist_ok=True)
    admin_token = _admin_token(data_dir)
    db = open_database(data_dir)
    server = None
    sender = None
    proxy = None
    try:
        migrate.upgrade(db.url)
        demo_keys = _load_demo(db) if demo else []
        server = build_server(ServerSettings(database_url=db.url, admin_token=admin_token,
                                             host=grpc_host, port=grpc_port))
        server.start()
        sender = wallet.start_sender(server.engine, wallet_settings)
        proxy = envoy.EnvoyProcess.start(
            http_port=http_port, upstream_host=_connect_host(grpc_host),
            upstream_port=server.port, work_dir=data_dir / "envoy")
        _print_banner(http_port=http_port, grpc_host=grpc_host, grpc_port=server.port,
                      data_dir=data_dir, db=db, demo_keys=demo_keys)
        _supervise(proxy, stop)
    finally:
        if proxy is not None:
            proxy.stop()
        if sender is not None:
            sender.stop()
        if server is not None:
            server.stop()
        db.stop()
    say("stopped")
    return 0


def _connect_host(bind_host: str) -> str:
    return "127.0.0.1" if bind_host in ("0.0.0.0", "", "::") else bind_host  # noqa: S104


def _supervise(proxy: envoy.EnvoyProcess, stop: threading.Event) -> None:
    """Wait for SIGINT/SIGTERM; restart Envoy if it dies, a few times at most."""
    restarts = 0
    while not stop.wait(1.0):
        code = proxy.poll()
        if code is None:
            continue
        if restarts >= ENVOY_RESTARTS:
            raise SystemExit(f"error: Envoy keeps exiting (last code {code}); see {proxy.log_path}")
        restarts += 1
        log.error("Envoy exited with %s; restarting (%d/%d)", code, restarts, ENVOY_RESTARTS)
        proxy.restart()


def _print_banner(*, http_port: int, grpc_host: str, grpc_port: int, data_dir: Path, db: Database,
                  demo_keys: list[dict[str, object]]) -> None:
    where = "embedded PostgreSQL in " + str(data_dir / "pgdata") if db.embedded else \
        "LOYALTY_DATABASE_URL"
    lines = [
        f"loyalty is up: HTTP API http://127.0.0.1:{http_port}/api/v1  "
        f"gRPC {grpc_host}:{grpc_port}",
        f"database: {where}",
        f"admin token: LOYALTY_ADMIN_TOKEN or {data_dir / 'admin_token'}",
    ]
    for key in demo_keys:
        permisos = ", ".join(str(p) for p in key.get("permisos", [])) or "(none)"  # type: ignore[attr-defined]
        lines.append(f"demo key [{key['programa']}] {key['integracion']}: {key['clave']}  "
                     f"permisos: {permisos}")
    lines.append("Ctrl-C stops everything.")
    say("\n".join(lines))
