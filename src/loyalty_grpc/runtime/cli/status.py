"""`loyalty status`: is it healthy, what runs, is the data consistent.

It checks the gRPC server's health (LOYALTY_GRPC_TARGET / `--target`), shows what the
`loyalty up`/`serve` supervising from the data dir runs and how often each kind of child
was restarted (runtime/process/process_file.py), prints the service,
Envoy and PostgreSQL versions, the Alembic revision applied against the package's head, the
wallet outbox backlog and the ledger consistency check, and exits 1 when anything that
matters is wrong (server not SERVING, database unreachable or behind, a balance that
differs from its ledger). The outbox backlog is reported, never judged: it drains by itself.

The database is LOYALTY_DATABASE_URL or the embedded one in the data dir; when `loyalty up`
is running on that data dir its PostgreSQL is reused (and left running), else it is started
just for this and stopped again.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text

from loyalty_grpc import __version__
from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.postgres import Database, start_embedded
from loyalty_grpc.runtime.process.process_file import ago, summary
from loyalty_grpc.runtime.settings import GrpcTls, Settings

if TYPE_CHECKING:
    from loyalty_grpc.wallet.backlog import Backlog

ENVOY_TIMEOUT = 10.0


@dataclass(frozen=True)
class Line:
    name: str
    value: str
    ok: bool = True


def grpc_health(target: str, tls: GrpcTls | None) -> Line:
    from loyalty_grpc.runtime.server_health import SERVING, health

    answer = health(target, tls=tls)
    return Line("health", f"{answer} ({target})", ok=answer == SERVING)


def process_lines(data_dir: Path, work_dir: Path) -> list[Line]:
    """What the `loyalty up`/`serve` supervising from this data dir and the `gateway run`
    from that work dir run: how many processes, and their restarts
    (runtime/process/process_file.py)."""
    lines = []
    for folder in dict.fromkeys((data_dir, work_dir)):
        found = summary(folder)
        if found is not None:
            lines += [
                Line("processes", found.processes, ok=found.ok),
                Line("restarts", found.restarts),
            ]
    return lines or [
        Line(
            "processes",
            f"no `{command('up')}`, `serve` or `gateway run` supervising from {data_dir}",
        )
    ]


def gateway_lines(work_dir: Path) -> list[Line]:
    """The gateway running from `work_dir` (`up`: DATA_DIR/envoy), from its admin
    interface (the Unix socket of the work dir: as the gateway's user or root): state and
    uptime, listeners, the configuration versions applied, and the upstream servers as
    Envoy sees them. No gateway there is information, not a fault (a server-only host has
    none)."""
    from loyalty_grpc.runtime.gateway.admin import CLUSTERS, LISTENERS, address_text
    from loyalty_grpc.runtime.gateway.shape import (
        EnvoyError,
    )
    from loyalty_grpc.runtime.gateway.xds import WorkDir

    work = WorkDir(work_dir)
    admin = work.admin()
    try:
        info = admin.json("/server_info")
        listeners = admin.json("/listeners?format=json")
        hosts = admin.upstream_hosts()
        stats = admin.xds_stats()
    except PermissionError:
        return [
            Line(
                "gateway",
                f"admin socket {admin}: permission denied (run status as the gateway's user)",
                ok=False,
            )
        ]
    except (FileNotFoundError, ConnectionRefusedError):
        if work.legacy_admin_address.is_file():
            return [
                Line(
                    "gateway",
                    f"started from {work_dir} by an older version (admin on a TCP port): "
                    "restart it",
                    ok=False,
                )
            ]
        return [Line("gateway", f"none running from {work_dir}")]
    except (OSError, ValueError, EnvoyError) as exc:
        return [Line("gateway", f"admin {admin} does not answer ({exc})", ok=False)]
    state = str(info.get("state", "?"))
    return [
        Line(
            "gateway",
            f"Envoy {state}, up {info.get('uptime_current_epoch', '?')} (admin {admin})",
            ok=state == "LIVE",
        ),
        Line(
            "listeners",
            ", ".join(
                f"{listener.get('name')} {address_text(listener.get('local_address'))}"
                for listener in listeners.get("listener_statuses", [])
            )
            or "none",
            ok=bool(listeners.get("listener_statuses")),
        ),
        Line(
            "gateway config",
            f"listeners {LISTENERS.version(stats) or '?'}, "
            f"clusters {CLUSTERS.version(stats) or '?'}",
        ),
        Line(
            "upstreams",
            ", ".join(f"{host.address} {host.health}" for host in hosts) or "none",
            ok=any(host.healthy for host in hosts),
        ),
    ]


def envoy_version() -> Line:
    from loyalty_grpc.runtime.gateway.config import (
        envoy_binary,
    )
    from loyalty_grpc.runtime.gateway.shape import (
        EnvoyError,
    )

    try:
        done = subprocess.run(  # noqa: S603
            [str(envoy_binary()), "--version"],
            capture_output=True,
            text=True,
            timeout=ENVOY_TIMEOUT,
            check=True,
        )
    except (EnvoyError, OSError, subprocess.SubprocessError) as exc:
        return Line("envoy", f"unknown ({exc})")
    found = re.search(r"/(\d+\.\d+\.\d+)/", done.stdout)
    return Line("envoy", found.group(1) if found else done.stdout.strip())


def database_lines(engine: Engine, url: str) -> list[Line]:
    """PostgreSQL version, migrations, wallet outbox, ledger check."""
    from loyalty_grpc.store import migrate
    from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL
    from loyalty_grpc.wallet.backlog import backlog

    with engine.connect() as conn:
        version = conn.execute(text("SHOW server_version")).scalar_one()
    lines = [Line("postgresql", str(version))]
    schema = migrate.check(url)  # the rule `serve` starts by (docs/deployment.md "Upgrades")
    current, head = schema.applied, schema.head
    if not schema.usable:
        lines.append(
            Line(
                "migrations",
                f"{current or 'none'} applied, head is {head}: run `{command('migrate')}`",
                ok=False,
            )
        )
        return lines
    if schema.state is migrate.SchemaState.NEWER:
        lines.append(
            Line("migrations", f"{current} applied, newer than this version's head {head}")
        )
    else:
        lines.append(Line("migrations", f"{current} (head)"))
    with engine.connect() as conn:
        wallet = backlog(conn)
        mismatched = conn.execute(
            text(f"SELECT count(*) FROM ({LEDGER_MISMATCH_SQL}) AS m")  # noqa: S608
        ).scalar_one()
    lines.append(Line("wallet outbox", _backlog_text(wallet)))
    lines.append(
        Line(
            "ledger",
            f"{mismatched} fans whose balance differs from their ledger",
            ok=mismatched == 0,
        )
    )
    return lines


def _backlog_text(wallet: Backlog) -> str:
    """`12 fans pending (2 waiting for a retry), oldest 3 s ago`; beyond
    wallet.backlog.EXACT_UP_TO an estimate, e.g. `≈ 1200000 fans pending (estimate;
    10000+ waiting for a retry), oldest 14 min ago`."""
    from loyalty_grpc.wallet.backlog import EXACT_UP_TO

    if not wallet.fans:
        return "0 fans pending"
    if wallet.exact:
        counts = f"{wallet.fans} fans pending ({wallet.waiting}"
    else:
        capped = "+" if wallet.waiting >= EXACT_UP_TO else ""
        counts = f"≈ {wallet.fans} fans pending (estimate; {wallet.waiting}{capped}"
    return f"{counts} waiting for a retry), oldest {ago(wallet.oldest_seconds)} ago"


def _open(settings: Settings) -> Database | str:
    """The database, or why there is none."""
    if settings.database_url:
        return Database(url=settings.database_url, embedded=False)
    pgdata = settings.data_dir.resolve() / "pgdata"
    if not (pgdata / "PG_VERSION").exists():
        return f"none: no LOYALTY_DATABASE_URL and no embedded database in {pgdata}"
    return start_embedded(pgdata)


def collect(settings: Settings, work_dir: Path | None = None) -> list[Line]:
    """Every line; `work_dir` is the gateway's (default DATA_DIR/envoy, as `up` runs it)."""
    from loyalty_grpc.store.db import make_engine

    work_dir = work_dir if work_dir is not None else settings.data_dir / "envoy"
    lines = [
        grpc_health(settings.server_target, settings.grpc_tls()),
        *process_lines(settings.data_dir, work_dir),
        *gateway_lines(work_dir),
        Line("service", f"loyalty {__version__}"),
        envoy_version(),
    ]
    try:
        db = _open(settings)
    except Exception as exc:  # reported, not raised: this is a diagnosis
        return [*lines, Line("postgresql", f"cannot start the embedded server: {exc}", ok=False)]
    if isinstance(db, str):
        return [*lines, Line("postgresql", db, ok=False)]
    engine = make_engine(db.url, pool_size=1)
    try:
        lines += database_lines(engine, db.url)
    except Exception as exc:
        lines.append(Line("postgresql", f"error: {str(exc).splitlines()[0]}", ok=False))
    finally:
        engine.dispose()
        db.stop()
    return lines


def status_command(settings: Settings, work_dir: Path | None = None) -> int:
    lines = collect(settings, work_dir)
    width = max(len(line.name) for line in lines) + 2
    out = [
        f"{line.name + ':':{width}}{line.value}" + ("" if line.ok else "  << UNHEALTHY")
        for line in lines
    ]
    healthy = all(line.ok for line in lines)
    out.append("status: " + ("healthy" if healthy else "UNHEALTHY"))
    say("\n".join(out))
    return 0 if healthy else 1
