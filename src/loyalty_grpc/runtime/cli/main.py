"""The `loyalty` command: parse (cli/parser.py), read the settings, run the command."""

from __future__ import annotations

import argparse
import sys

from loyalty_grpc.runtime.cli.parser import FLAGS, build_parser
from loyalty_grpc.runtime.gateway.shape import (
    EnvoyError,
)
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from loyalty_grpc.runtime.logs import configure_logging
from loyalty_grpc.runtime.settings import EXIT_CONFIG, GATEWAY_RUN, ConfigError, Settings


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = _settings(args)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_CONFIG
    try:
        return _run(args, settings)
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_CONFIG
    except (OSError, EnvoyError) as exc:  # a port in use, Envoy failing to start
        sys.stderr.write(f"error: {exc}\n")
        return 1


def _settings(args: argparse.Namespace) -> Settings:
    """The environment (the wallet's too, for the commands that run the sender), then the
    flags this command has."""
    env = Settings.from_env(wallet=args.command in ("up", "serve"))
    if args.command == "admin":  # it reads its own flags (cli/admin/parser.py)
        return env.with_flags(log_level=args.log_level, log_format=args.log_format)
    return env.with_flags(**{name: getattr(args, name, None) for name in FLAGS})


def _run(args: argparse.Namespace, settings: Settings) -> int:  # noqa: PLR0911 (one per command)
    configure_logging(settings.log_level, settings.log_format_for(_command_name(args)))
    if args.command == "up":
        from loyalty_grpc.runtime.cli.up import up

        return up(settings, demo=args.demo)
    if args.command == "serve":
        from loyalty_grpc.runtime.cli.serve import serve_command

        return serve_command(settings, share_port=args.share_port)
    if args.command == "migrate":
        from loyalty_grpc.runtime.cli.migrate import migrate_command

        return migrate_command(settings.data_dir, settings.database_url, contract=args.contract)
    if args.command == "status":
        from loyalty_grpc.runtime.cli.status import status_command

        return status_command(settings, args.work_dir)
    if args.command == "wallet":
        from loyalty_grpc.runtime.cli.wallet import send_command

        return send_command(settings.data_dir, settings.database_url, batch=args.batch)
    if args.command == "gateway":
        return _gateway(args, settings)
    if args.command == "backup":
        from loyalty_grpc.runtime.cli.backup import backup_command

        return backup_command(args, settings)
    from loyalty_grpc.runtime.cli.admin import run_admin

    return run_admin(args, settings)


def _command_name(args: argparse.Namespace) -> str:
    """`serve`, `gateway run`, ...: the command as settings.log_format_for knows it."""
    sub = getattr(args, "gateway_command", None) if args.command == "gateway" else None
    return f"{args.command} {sub}" if sub else str(args.command)


def _gateway(args: argparse.Namespace, settings: Settings) -> int:
    work_dir = args.work_dir or settings.data_dir / "envoy"
    if args.gateway_command == "check":
        from loyalty_grpc.runtime.gateway.xds import check_command

        return check_command(
            args.gateway_dir,
            work_dir,
            tls=_tls(settings),
            upstream_tls=settings.grpc_tls(),
            trusted_proxies=settings.trusted_proxies,
        )
    if args.gateway_command == "reload":
        from loyalty_grpc.runtime.gateway.reload import reload_command

        return reload_command(
            work_dir,
            args.gateway_dir,
            settings.log_format_for(_command_name(args)),
            upstreams=settings.gateway_upstreams,
        )
    from loyalty_grpc.runtime.gateway.envoy import run_gateway, spec_from_settings

    spec = spec_from_settings(
        settings, upstreams=settings.upstreams, tls=_tls(settings), gateway_dir=args.gateway_dir
    )
    return run_gateway(
        spec,
        work_dir=work_dir,
        log_format=settings.log_format_for(GATEWAY_RUN),
        data_dir=settings.data_dir,
    )


def _tls(settings: Settings) -> TlsFiles | None:
    """The gateway's HTTPS files (ConfigError when only one is set or one is unusable)."""
    files = settings.tls_files()
    return TlsFiles(cert=files[0], key=files[1]) if files is not None else None
