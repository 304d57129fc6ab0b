"""`loyalty up`: everything on one machine, in one command: PostgreSQL (embedded unless
LOYALTY_DATABASE_URL), migrations, the gRPC workers and Envoy, supervised, and a banner
of where each one is."""

from __future__ import annotations

import logging
from pathlib import Path

from loyalty_grpc.runtime import metrics
from loyalty_grpc.runtime.admin_token import ensure_admin_token
from loyalty_grpc.runtime.cli.demo import demo_lines, load_demo
from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.gateway import envoy, reloaded
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from loyalty_grpc.runtime.postgres import Database, open_database
from loyalty_grpc.runtime.process.serving import server_settings, serving
from loyalty_grpc.runtime.process.signals import stop_event
from loyalty_grpc.runtime.settings import (
    UP,
    ConfigError,
    Settings,
    connect_host,
    is_loopback,
    join_target,
)
from loyalty_grpc.store import migrate

log = logging.getLogger(__name__)


def _up_admin_token(settings: Settings) -> str:
    """`up` (one machine): the configured token, else one generated into the data dir."""
    return settings.configured_admin_token() or ensure_admin_token(settings.data_dir)


def _database(settings: Settings) -> Database:
    """The database `up` runs on; with LOYALTY_BACKUP_DIR, an embedded one archives its WAL
    there (an external server archives by its own configuration: docs/backups.md)."""
    db = open_database(settings.data_dir, settings.database_url)
    if settings.backup_dir is None:
        return db
    if not db.embedded:
        log.info(
            "LOYALTY_BACKUP_DIR: an external PostgreSQL archives its WAL by its own "
            "configuration (`backup archive-settings`)"
        )
        return db
    from loyalty_grpc.runtime.backup.embedded import archive_embedded
    from loyalty_grpc.runtime.backup.repository import BackupError

    pgdata = settings.data_dir.resolve() / "pgdata"
    try:
        return archive_embedded(
            db, pgdata, settings.backup_dir, lambda: open_database(settings.data_dir, None)
        )
    except (BackupError, OSError) as exc:
        db.stop()
        raise ConfigError(str(exc)) from None


def up(settings: Settings, *, demo: bool) -> int:
    # Checked before anything starts (a wrong value: exit 2, nothing created).
    tls_files = settings.tls_files()
    settings.gateway_listen_host(tls=tls_files is not None)
    stop = stop_event()
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    admin_token = _up_admin_token(settings)
    db = _database(settings)
    try:
        schema = migrate.Schema.of(migrate.upgrade(db.url))
        if schema.state is migrate.SchemaState.CONTRACT_PENDING:
            log.info("%s", schema.contract_note(command("migrate")))
        demo_banner = demo_lines(load_demo(db.url)) if demo else []
        server = server_settings(settings, database_url=db.url, admin_token=admin_token)
        with serving(settings, server, command=UP) as supervisor:
            spec = envoy.spec_from_settings(
                settings,
                upstreams=(join_target(connect_host(server.host), supervisor.pool.port),),
                tls=TlsFiles(*tls_files) if tls_files is not None else None,
            )
            # What a `gateway reload` chose since still stands (gateway/reloaded.py).
            resumed = reloaded.resume(spec, (data_dir / "envoy").resolve())
            proxy = envoy.EnvoyProcess.start_spec(
                resumed.spec, work_dir=data_dir / "envoy", log_format=settings.log_format_for(UP)
            )
            resumed.commit(proxy.work_dir)
            for note in resumed.notes:
                log.warning("%s", note)
            try:
                supervisor.add(
                    envoy.supervised(
                        proxy, on_restart=metrics.count_restart, on_change=supervisor.table.write
                    )
                )
                _print_banner(
                    http_host=proxy.listen_host,
                    http_port=settings.http_port,
                    https=proxy.tls,
                    redirect_port=settings.http_redirect_port,
                    public_host=settings.public_host,
                    grpc_tls=server.tls_cert is not None,
                    envoy_admin=f"Envoy: {envoy.threads_text(proxy.concurrency)}, admin socket "
                    f"{proxy.admin} (this user only)" + _prometheus(settings),
                    grpc_host=server.host,
                    grpc_port=supervisor.pool.port,
                    workers=settings.workers,
                    data_dir=data_dir,
                    db=db,
                    token_configured=settings.configured_admin_token() is not None,
                    demo=demo_banner,
                )
                supervisor.run(stop)
            finally:
                proxy.stop()  # HTTP stops first; then the sender and the workers, one by one
                proxy.work.clear()  # what only a running gateway uses (the log stays)
    finally:
        db.stop()
    say("stopped")
    return 0


def _print_banner(
    *,
    http_host: str,
    http_port: int,
    grpc_host: str,
    grpc_port: int,
    workers: int,
    https: bool = False,
    redirect_port: int | None = None,
    public_host: str | None = None,
    grpc_tls: bool = False,
    envoy_admin: str = "",
    data_dir: Path,
    db: Database,
    token_configured: bool,
    demo: list[str],
) -> None:
    where = (
        "embedded PostgreSQL in " + str(data_dir / "pgdata")
        if db.embedded
        else "LOYALTY_DATABASE_URL"
    )
    lines = [
        f"loyalty is up: HTTP API {'https' if https else 'http'}://"
        f"{_url_host(connect_host(http_host))}:{http_port}/api/v1"
        f"{'' if is_loopback(http_host) else f' (listening on {http_host})'}  "
        f"gRPC {grpc_host}:{grpc_port} ({workers} workers"
        f"{', mutual TLS' if grpc_tls else ''})",
        *(
            [
                "plain HTTP beyond loopback (LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK): API keys "
                "and fans' data cross the network in clear"
            ]
            if not (https or is_loopback(http_host))
            else []
        ),
        *(
            [
                f"plain HTTP on port {redirect_port}: redirects GET/HEAD to "
                f"https://{public_host}, refuses the rest"
            ]
            if redirect_port is not None
            else []
        ),
        *([envoy_admin] if envoy_admin else []),
        f"database: {where}",
        "admin token: "
        + (
            "LOYALTY_ADMIN_TOKEN or LOYALTY_ADMIN_TOKEN_FILE"
            if token_configured
            else f"generated into {data_dir / 'admin_token'}"
        ),
    ]
    lines += demo
    lines.append("Ctrl-C stops everything.")
    say("\n".join(lines))


def _prometheus(settings: Settings) -> str:
    """Where Envoy's series are, when LOYALTY_ENVOY_METRICS_PORT asks for them."""
    url = envoy.metrics_url(settings.envoy_metrics_host, settings.envoy_metrics_port)
    return f"; its Prometheus series {url}" if url else ""


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
