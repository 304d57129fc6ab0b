"""The integration tests' real server: one gRPC server (build_server) per test module on that
module's database (`db_url`), a channel to it, and `loyalty admin` run in-process against it.

A module changes the server's settings by overriding `server_settings`; the admin token is
`ADMIN_TOKEN` of tests/support.py."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from loyalty_grpc.api.server import GrpcServer, ServerSettings, build_server
from loyalty_grpc.runtime.cli.parser import build_parser
from loyalty_grpc.runtime.settings import Settings
from tests.support import ADMIN_TOKEN

AdminCli = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def server_settings() -> dict[str, Any]:
    """ServerSettings beyond the usual ones (no key cache, 4 threads): override in a module."""
    return {}


@pytest.fixture(scope="module")
def server(db_url: str, server_settings: dict[str, Any]) -> Iterator[GrpcServer]:
    """A real server on a free port, on this module's database, stopped after the module."""
    options: dict[str, Any] = {"key_cache_seconds": 0, "max_workers": 4, **server_settings}
    srv = build_server(
        ServerSettings(database_url=db_url, admin_token=ADMIN_TOKEN, port=0, **options)
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def channel(server: GrpcServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


@pytest.fixture
def admin_cli(
    server: GrpcServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> AdminCli:
    """`loyalty admin <argv>` in this process against `server` (or `target`), with the admin
    token in the environment; its exit code, stdout and stderr. `tty=True` makes stderr a
    terminal (progress lines)."""
    monkeypatch.setenv("LOYALTY_ADMIN_TOKEN", ADMIN_TOKEN)

    def run(*argv: str, target: str | None = None, tty: bool = False) -> tuple[int, str, str]:
        args = build_parser().parse_args(
            ["admin", "--target", target or f"127.0.0.1:{server.port}", *argv]
        )
        from loyalty_grpc.runtime.cli.admin import run_admin

        if tty:
            monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        code = run_admin(args, Settings.from_env(wallet=False))
        out, err = capsys.readouterr()
        return code, out, err

    return run
