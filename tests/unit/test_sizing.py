"""Issue 28: Envoy's worker threads follow the machine (and LOYALTY_GATEWAY_THREADS), and
the sizing figures of docs/sizing.md are the ones the code uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime import metrics, sizing
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, spec_from_settings
from loyalty_grpc.runtime.gateway.xds import install
from loyalty_grpc.runtime.process import serving
from loyalty_grpc.runtime.settings import (
    MAX_GATEWAY_THREADS,
    ConfigError,
    Settings,
    default_gateway_threads,
    default_workers,
    machine_cores,
)
from loyalty_grpc.store.db import make_engine, most_connections


@pytest.mark.parametrize(
    ("cores", "threads"),
    [(1, 1), (2, 1), (4, 1), (7, 1), (8, 2), (16, 4), (32, 8), (64, 16), (4096, 256)],
)
def test_the_gateway_gets_a_quarter_of_the_cores_and_one_thread_on_two(
    cores: int, threads: int
) -> None:
    assert default_gateway_threads(cores) == threads


def test_the_default_follows_the_cores_this_process_may_use() -> None:
    settings = Settings.from_env({}, wallet=False)
    assert settings.gateway_threads == default_gateway_threads(machine_cores())
    assert settings.workers == default_workers(machine_cores())


def test_the_setting_and_the_flag_set_the_threads() -> None:
    settings = Settings.from_env({"LOYALTY_GATEWAY_THREADS": "3"}, wallet=False)
    assert settings.gateway_threads == 3
    assert settings.with_flags(gateway_threads="6").gateway_threads == 6


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5", str(MAX_GATEWAY_THREADS + 1)])
def test_a_wrong_thread_count_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match="LOYALTY_GATEWAY_THREADS"):
        Settings.from_env({"LOYALTY_GATEWAY_THREADS": text}, wallet=False)


def _command(settings: Settings, tmp_path: Path) -> list[str]:
    spec = spec_from_settings(settings, upstreams=("127.0.0.1:50051",), tls=None)
    return EnvoyProcess.of(spec, install(spec, tmp_path)).command()


@pytest.mark.parametrize("threads", ["1", "5"])
def test_the_rendered_command_line_follows_the_setting(threads: str, tmp_path: Path) -> None:
    settings = Settings.from_env({"LOYALTY_GATEWAY_THREADS": threads}, wallet=False)
    command = _command(settings, tmp_path)
    assert command[command.index("--concurrency") + 1] == threads
    assert command.count("--concurrency") == 1


def test_the_spec_keeps_the_threads_for_a_restart_and_old_specs_ran_one() -> None:
    settings = Settings.from_env({"LOYALTY_GATEWAY_THREADS": "3"}, wallet=False)
    spec = spec_from_settings(settings, upstreams=("127.0.0.1:50051",), tls=None)
    assert type(spec).from_json(spec.to_json()).threads == 3
    # gateway.json of a version before the setting: its Envoy ran one thread.
    fields = json.loads(spec.to_json())
    del fields["threads"]
    assert type(spec).from_json(json.dumps(fields)).threads == 1


def test_the_connection_figures_are_the_engines_own() -> None:
    engine = make_engine("postgresql://u@127.0.0.1:1/db", pool_size=7)  # never connects
    try:
        pool = engine.pool
        assert pool.size() + pool._max_overflow == most_connections(7)  # type: ignore[attr-defined]
    finally:
        engine.dispose()
    assert sizing.worker_connections() == most_connections(
        ServerSettings(database_url="postgresql://", admin_token="t").max_workers
    )
    assert sizing.parent_connections() == (
        most_connections(serving.SENDER_POOL_SIZE) + metrics.METRICS_CONNECTIONS
    )
    size = sizing.size_for(16)
    assert size.serve_connections == 16 * size.worker_connections + sizing.parent_connections()
    assert size.max_connections == size.serve_connections + sizing.OPERATOR_CONNECTIONS
    assert (size.gateway_threads, size.workers) == (4, 16)
