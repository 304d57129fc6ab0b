"""The `loyalty` command line: its commands and flags (argparse). The flags are read as
text and checked by Settings.with_flags, like the environment variables they override."""

from __future__ import annotations

import argparse
from pathlib import Path

from loyalty_grpc import __version__
from loyalty_grpc.runtime.cli.admin import add_admin_commands
from loyalty_grpc.runtime.cli.backup import add_backup_commands
from loyalty_grpc.runtime.console import command, program
from loyalty_grpc.runtime.settings import (
    ENVOY_HEAP_MIN_MB,
    ENVOY_HEAP_SHARE,
    GATEWAY_CORES_PER_THREAD,
    LOG_FORMATS,
    LOG_LEVELS,
    Settings,
)

HTTP_PORT_HELP = f"env LOYALTY_HTTP_PORT, default {Settings.http_port}"

# Flags read as text (default None: the environment's value stands) and checked by
# Settings.with_flags, like the variables they override (runtime/settings.py).
FLAGS = (
    "data_dir",
    "backup_dir",
    "grpc_host",
    "grpc_port",
    "http_port",
    "http_host",
    "plain_http_beyond_loopback",
    "tls_cert",
    "tls_key",
    "http_redirect_port",
    "public_host",
    "trusted_proxies",
    "grpc_tls_cert",
    "grpc_tls_key",
    "grpc_tls_ca",
    "workers",
    "metrics_port",
    "log_level",
    "log_format",
    "grpc_target",
    "gateway_upstreams",
    "envoy_heap_mb",
    "gateway_threads",
    "envoy_metrics_port",
    "envoy_metrics_host",
)


def _serving_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grpc-port", metavar="PORT", help=f"env LOYALTY_GRPC_PORT, default {Settings.grpc_port}"
    )
    parser.add_argument(
        "--grpc-host",
        metavar="HOST",
        help=f"env LOYALTY_GRPC_HOST, default {Settings().listen_host} (the back office shares "
        "the port)",
    )
    parser.add_argument(
        "--workers",
        metavar="N",
        help="gRPC worker processes sharing the port (env LOYALTY_WORKERS, default: CPU count)",
    )
    parser.add_argument(
        "--metrics-port",
        metavar="PORT",
        help=f"Prometheus /metrics (env LOYALTY_METRICS_PORT, default {Settings.metrics_port}; "
        "0 = off)",
    )
    _grpc_tls_flags(parser)
    _data_dir_flag(parser)


def _http_host_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http-host",
        metavar="HOST",
        help="Envoy's listen address (env LOYALTY_HTTP_HOST, default 127.0.0.1 with plain "
        "HTTP, 0.0.0.0 with TLS)",
    )
    parser.add_argument(
        "--plain-http-beyond-loopback",
        action="store_const",
        const="1",
        help="let plain HTTP listen beyond loopback: API keys cross the network in clear "
        "(env LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK=1; without TLS, a --http-host beyond "
        "loopback is refused otherwise)",
    )


def _trusted_proxies_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trusted-proxies",
        metavar="CIDR[,CIDR...]",
        help="proxies in front of Envoy whose X-Forwarded-For names the client (env "
        "LOYALTY_TRUSTED_PROXIES, default none: the client is the TCP peer)",
    )


def _envoy_resource_flags(parser: argparse.ArgumentParser) -> None:
    """Envoy's own resources: its heap budget and its worker threads."""
    _gateway_threads_flag(parser)
    parser.add_argument(
        "--envoy-heap-mb",
        metavar="MIB",
        help="Envoy's heap budget, as it fills Envoy sheds load (env LOYALTY_ENVOY_HEAP_MB, "
        f"default: 1/{ENVOY_HEAP_SHARE} of the machine's memory, at least {ENVOY_HEAP_MIN_MB})",
    )


def _gateway_threads_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gateway-threads",
        metavar="N",
        help="Envoy's worker threads (env LOYALTY_GATEWAY_THREADS, default: the CPU count / "
        f"{GATEWAY_CORES_PER_THREAD}, at least 1)",
    )


def _tls_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="HTTPS: PEM certificate chain (env LOYALTY_TLS_CERT; with --tls-key)",
    )
    parser.add_argument(
        "--tls-key",
        metavar="FILE",
        help="HTTPS: PEM private key (env LOYALTY_TLS_KEY; with --tls-cert)",
    )
    parser.add_argument(
        "--http-redirect-port",
        metavar="PORT",
        help="with HTTPS: a plain-HTTP port that only redirects GET/HEAD to https on "
        "--public-host (env LOYALTY_HTTP_REDIRECT_PORT, default: no plain HTTP at all)",
    )
    parser.add_argument(
        "--public-host",
        metavar="HOST[:PORT]",
        help="the API's name in its certificate: where the redirect port sends clients, "
        "never the request's Host (env LOYALTY_PUBLIC_HOST; required with a redirect port)",
    )


def _envoy_metrics_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--envoy-metrics-port",
        metavar="PORT",
        help="Envoy's Prometheus series and the gateway's own: GET /stats/prometheus and "
        "/ready, nothing else of its admin interface (a Unix socket) (env "
        f"LOYALTY_ENVOY_METRICS_PORT, default {Settings.envoy_metrics_port}: none)",
    )
    parser.add_argument(
        "--envoy-metrics-host",
        metavar="HOST",
        help="address of that listener (env LOYALTY_ENVOY_METRICS_HOST, default "
        f"{Settings.envoy_metrics_host})",
    )


def _grpc_tls_flags(parser: argparse.ArgumentParser) -> None:
    for name, what in (
        ("cert", "this process's PEM certificate"),
        ("key", "its PEM private key"),
        ("ca", "the PEM CA every certificate of the gRPC port chains to"),
    ):
        parser.add_argument(
            f"--grpc-tls-{name}",
            metavar="FILE",
            help=f"mutual TLS on the gRPC port: {what} (env LOYALTY_GRPC_TLS_{name.upper()}; "
            "all three or none)",
        )


def _data_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", metavar="DIR", help=f"env LOYALTY_DATA_DIR, default {Settings.data_dir}"
    )


def _work_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="Envoy's work directory (default: DATA_DIR/envoy, the one of "
        f"`{command('up')}`; env LOYALTY_DATA_DIR, default .loyalty)",
    )


def _gateway_dir_flag(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--gateway-dir",
        type=Path,
        metavar="DIR",
        help="folder with envoy.yaml, envelope.lua, loyalty_pos.pb and "
        f"openapi.json (default: {default})",
    )


def _gateway_run_dirs(parser: argparse.ArgumentParser) -> None:
    _work_dir_flag(parser)
    _data_dir_flag(parser)  # where `status` learns the work dir (gateway/registered.py)
    _gateway_dir_flag(parser, "the packaged gateway folder")


def _upstream_flag(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--upstream",
        dest="gateway_upstreams",
        metavar="HOST:PORT[,HOST:PORT...]",
        help=f"the gRPC servers Envoy forwards to ({default})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program(), description="Loyalty POS integration service")
    parser.add_argument("--version", action="version", version=f"loyalty {__version__}")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        help="env LOYALTY_LOG_LEVEL, default INFO",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="env LOYALTY_LOG_FORMAT, default json for serve and gateway run, text for the others",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run everything: PostgreSQL, migrations, gRPC workers, Envoy")
    up.add_argument("--http-port", metavar="PORT", help=HTTP_PORT_HELP)
    _http_host_flag(up)
    _tls_flags(up)
    _trusted_proxies_flag(up)
    _envoy_resource_flags(up)
    _envoy_metrics_flags(up)
    _serving_flags(up)
    up.add_argument("--demo", action="store_true", help="load the demo program and print its keys")

    serve = sub.add_parser("serve", help="run the gRPC workers only (database already migrated)")
    _serving_flags(serve)
    serve.add_argument(
        "--share-port",
        action="store_true",
        help="start beside a `serve` already on the port (an upgrade: start the new "
        "version with its own --data-dir and --metrics-port, then stop the old one)",
    )

    migrate = sub.add_parser(
        "migrate",
        help="apply database migrations (LOYALTY_DATABASE_URL "
        "or the embedded PostgreSQL in --data-dir)",
    )
    migrate.add_argument(
        "--contract",
        action="store_true",
        help="also apply contract revisions, which the previous version cannot run on: "
        'once every server runs this version (docs/deployment.md "Upgrades")',
    )
    _data_dir_flag(migrate)

    status = sub.add_parser(
        "status",
        help="health, versions, migrations, outbox backlog, ledger check; exit 1 when unhealthy",
    )
    status.add_argument(
        "--target",
        dest="grpc_target",
        metavar="HOST:PORT",
        help="gRPC server (env LOYALTY_GRPC_TARGET, default: where serve listens, "
        "LOYALTY_GRPC_HOST:LOYALTY_GRPC_PORT)",
    )
    _data_dir_flag(status)
    _work_dir_flag(status)

    gateway = sub.add_parser(
        "gateway", help="Envoy gateway: check, run or reload its configuration"
    )
    gsub = gateway.add_subparsers(dest="gateway_command", required=True)
    gcheck = gsub.add_parser(
        "check",
        help="validate the gateway configuration with `envoy --mode validate`, as Envoy runs it",
    )
    _work_dir_flag(gcheck)
    _gateway_dir_flag(gcheck, "the folder the gateway in --work-dir runs, else the packaged one")
    grun = gsub.add_parser("run", help="run Envoy in front of a gRPC server")
    grun.add_argument("--http-port", metavar="PORT", help=HTTP_PORT_HELP)
    _http_host_flag(grun)
    _tls_flags(grun)
    _trusted_proxies_flag(grun)
    _envoy_resource_flags(grun)
    _grpc_tls_flags(grun)
    _upstream_flag(
        grun,
        "env LOYALTY_GATEWAY_UPSTREAMS, default: LOYALTY_GRPC_TARGET, else where serve "
        "listens on this host (LOYALTY_GRPC_HOST:LOYALTY_GRPC_PORT)",
    )
    _envoy_metrics_flags(grun)
    _gateway_run_dirs(grun)
    greload = gsub.add_parser(
        "reload",
        help="apply the gateway folder to a running gateway "
        "(`up` or `gateway run`) without a restart",
    )
    _work_dir_flag(greload)
    _gateway_dir_flag(greload, "the folder the gateway runs")
    _upstream_flag(
        greload,
        "the new list of servers (env LOYALTY_GATEWAY_UPSTREAMS; default: "
        "the servers the gateway runs with)",
    )

    wallet = sub.add_parser("wallet", help="wallet pass: deliver pending balances")
    wsub = wallet.add_subparsers(dest="wallet_command", required=True)
    wsend = wsub.add_parser(
        "send",
        help="deliver every due balance once, print a summary "
        "(LOYALTY_WALLET_* configure the provider)",
    )
    _data_dir_flag(wsend)
    wsend.add_argument(
        "--batch", type=int, default=None, help="fans per run (default: 1000 local, 100 google)"
    )

    add_backup_commands(
        sub.add_parser(
            "backup", help="base backups, WAL archive, point-in-time restore (docs/backups.md)"
        )
    )

    add_admin_commands(sub.add_parser("admin", help="back-office operations over gRPC"))
    return parser
