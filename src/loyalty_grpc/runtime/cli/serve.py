"""`loyalty serve`: the gRPC workers alone, on a database that exists and is migrated
(LOYALTY_DATABASE_URL); the parent's part it shares with `loyalty up` is
runtime/process/serving.py."""

from __future__ import annotations

import logging

from loyalty_grpc.runtime.console import announce, command
from loyalty_grpc.runtime.process.serving import server_settings, serving
from loyalty_grpc.runtime.process.signals import stop_event
from loyalty_grpc.runtime.schema import require_usable_schema
from loyalty_grpc.runtime.settings import SERVE, ConfigError, Settings

log = logging.getLogger(__name__)


def serve_command(settings: Settings, *, share_port: bool = False) -> int:
    database_url = settings.database_url
    if not database_url:
        raise ConfigError(
            f"`{command('serve')}` needs LOYALTY_DATABASE_URL (or use `{command('up')}`)"
        )
    if share_port and settings.grpc_port == 0:
        raise ConfigError("--share-port needs the port of the running `serve`, not 0")
    admin_token = _serve_admin_token(settings)
    # Before anything starts: a schema older than this code needs stops here (one line,
    # exit code 2); a newer one (a later version migrated it) is logged and served.
    require_usable_schema(database_url)
    stop = stop_event()
    server = server_settings(settings, database_url=database_url, admin_token=admin_token)
    with serving(settings, server, command=SERVE, share_port=share_port) as supervisor:
        announce(
            f"gRPC: {server.host}:{supervisor.pool.port} ({settings.workers} workers)",
            settings.log_format_for(SERVE),
        )
        supervisor.run(stop)
        log.info("stopping")
    return 0


def _serve_admin_token(settings: Settings) -> str:
    """`serve` (any number of hosts): the configured token, never a generated one, which
    would differ from host to host."""
    token = settings.configured_admin_token()
    if token is None:
        raise ConfigError(
            f"`{command('serve')}` needs the back-office token, the same on every host: set "
            "LOYALTY_ADMIN_TOKEN or LOYALTY_ADMIN_TOKEN_FILE "
            f"(`{command('up')}` generates one for a single machine)"
        )
    return token
