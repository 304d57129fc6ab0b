"""Each setting's default is stated once: the `Settings` field (or the module it takes it
from); the documented default (docs/configuration.md, `config_table`), the gRPC server's
own `ServerSettings` and the commands' help derive from it."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from loyalty_grpc.api import failed_checks, key_cache
from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.domain import rate_limit
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.settings import (
    VARIABLES,
    Settings,
    Variable,
    config_table,
    documented_default,
    field_of,
    plain_default,
)

# The variables whose field has one default value (not computed, not none: None or ()).
PLAIN = [
    v
    for v in VARIABLES
    if (name := field_of(v.name)) is not None and plain_default(name) not in (MISSING, None, ())
]


def test_the_settings_read_every_documented_plain_default_from_the_field() -> None:
    """A variable whose field has one default value documents no text of its own: the
    table shows the field's value, so the two cannot differ."""
    assert len(PLAIN) >= 15
    typed = [v.name for v in PLAIN if v.default is not None]
    assert typed == [], f"documented by hand, derive them (Variable.default=None): {typed}"


def shown(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("variable", PLAIN, ids=lambda v: v.name)
def test_the_table_shows_the_fields_default(variable: Variable) -> None:
    name = field_of(variable.name)
    assert name is not None
    text = documented_default(variable)
    assert text.startswith(f"`{shown(getattr(Settings(), name))}`")
    assert f"| `{variable.name}` | {text} |" in config_table()


def test_the_contracts_limits_are_the_defaults() -> None:
    settings = Settings()
    assert settings.rate_limit_per_minute == rate_limit.DEFAULT_CALLS_PER_MINUTE == 600
    assert settings.key_cache_seconds == key_cache.DEFAULT_TTL_SECONDS
    assert settings.failed_key_checks_per_minute == failed_checks.DEFAULT_LIMIT
    assert "| `LOYALTY_RATE_LIMIT_PER_MINUTE` | `600` |" in config_table()


def test_the_server_and_the_settings_share_their_defaults() -> None:
    """What `serve` passes and what a ServerSettings built by a test or a library user
    gets are the same defaults."""
    server = ServerSettings(database_url="x", admin_token="t")
    settings = Settings()
    assert (server.host, server.port) == (settings.listen_host, settings.grpc_port)
    shared = {f.name for f in fields(ServerSettings)} & {f.name for f in fields(Settings)}
    assert shared >= {
        "key_cache_seconds",
        "failed_key_checks_per_minute",
        "rate_limit_per_minute",
        "rate_limit_batch",
    }
    for name in shared - {"database_url", "admin_token"}:
        assert getattr(server, name) == getattr(settings, name), name


def test_the_gateway_renders_the_settings_defaults() -> None:
    settings = Settings()
    assert settings.server_target == envoy_config.DEFAULT_UPSTREAM
    assert settings.http_port == envoy_config.DEFAULT_HTTP_PORT
