"""Configuration: one place, every variable documented, wrong values named at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loyalty_grpc.runtime.cli import main
from loyalty_grpc.runtime.process.liveness import LivenessSettings
from loyalty_grpc.runtime.settings import (
    ENVOY_HEAP_MIN_MB,
    EXIT_CONFIG,
    MIB,
    ConfigError,
    Settings,
    checked_names,
    default_envoy_heap_bytes,
    default_workers,
    documented_names,
    join_target,
    split_target,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "loyalty_grpc"


def in_empty_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run from the empty `tmp_path` with the data dir's default (`.loyalty`, there): the
    suite points LOYALTY_DATA_DIR elsewhere for every test (tests/conftest.py)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOYALTY_DATA_DIR", raising=False)


def test_defaults():
    settings = Settings.from_env({})
    assert settings.database_url is None
    assert settings.admin_token is None
    assert settings.data_dir == Path(".loyalty")
    assert (settings.grpc_port, settings.http_port, settings.metrics_port) == (50051, 8080, 9464)
    assert settings.workers == default_workers() >= 1
    assert settings.rate_limit_per_minute == 600
    assert settings.key_cache_seconds == 5.0
    assert settings.log_level == "INFO"
    assert settings.grpc_target is None
    assert settings.server_target == "127.0.0.1:50051"
    assert settings.wallet.provider == "local"
    assert settings.listen_host == "127.0.0.1"  # `up` and `serve` alike
    assert (settings.log_format_for("up"), settings.log_format_for("serve")) == ("text", "json")


def test_values_from_the_environment():
    settings = Settings.from_env(
        {
            "LOYALTY_DATABASE_URL": "postgresql://u:p@db:5432/loyalty",
            "LOYALTY_WORKERS": "3",
            "LOYALTY_GRPC_HOST": "0.0.0.0",
            "LOYALTY_GRPC_PORT": "0",
            "LOYALTY_METRICS_PORT": "0",
            "LOYALTY_KEY_CACHE_SECONDS": "0.5",
            "LOYALTY_LOG_LEVEL": "debug",
            "LOYALTY_LOG_FORMAT": "JSON",
            "LOYALTY_RATE_LIMIT_PER_MINUTE": "60",
            "LOYALTY_DATA_DIR": "/srv/loyalty",
            "LOYALTY_HTTP_PORT": "",  # empty = unset
        }
    )
    assert settings.database_url == "postgresql://u:p@db:5432/loyalty"
    assert (settings.workers, settings.grpc_port, settings.metrics_port) == (3, 0, 0)
    assert settings.listen_host == "0.0.0.0"
    assert settings.key_cache_seconds == 0.5
    assert (settings.log_level, settings.log_format_for("up")) == ("DEBUG", "json")
    assert settings.rate_limit_per_minute == 60
    assert settings.data_dir == Path("/srv/loyalty")
    assert settings.http_port == 8080


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LOYALTY_WORKERS", "0", "LOYALTY_WORKERS must be an integer from 1 to 64, got '0'"),
        ("LOYALTY_WORKERS", "many", "LOYALTY_WORKERS must be an integer from 1 to 64, got 'many'"),
        (
            "LOYALTY_GRPC_PORT",
            "70000",
            "LOYALTY_GRPC_PORT must be a port number from 0 to 65535, got '70000'",
        ),
        (
            "LOYALTY_HTTP_PORT",
            "0",
            "LOYALTY_HTTP_PORT must be a port number from 1 to 65535, got '0'",
        ),
        (
            "LOYALTY_METRICS_PORT",
            "-1",
            "LOYALTY_METRICS_PORT must be a port number from 0 to 65535, got '-1'",
        ),
        (
            "LOYALTY_KEY_CACHE_SECONDS",
            "-1",
            "LOYALTY_KEY_CACHE_SECONDS must be a number of seconds, 0 or more, got '-1'",
        ),
        (
            "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS",
            "0",
            "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS must be a number of seconds, more than 0, "
            "got '0'",
        ),
        (
            "LOYALTY_WORKER_CHECK_MISSES",
            "0",
            "LOYALTY_WORKER_CHECK_MISSES must be an integer from 1 to 1000, got '0'",
        ),
        (
            "LOYALTY_KEY_CACHE_SECONDS",
            "nan",
            "LOYALTY_KEY_CACHE_SECONDS must be a number of seconds, 0 or more, got 'nan'",
        ),
        (
            "LOYALTY_LOG_LEVEL",
            "loud",
            "LOYALTY_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'loud'",
        ),
        ("LOYALTY_LOG_FORMAT", "xml", "LOYALTY_LOG_FORMAT must be one of json, text, got 'xml'"),
        (
            "LOYALTY_RATE_LIMIT_PER_MINUTE",
            "-1",
            "LOYALTY_RATE_LIMIT_PER_MINUTE must be an integer from 0 to 1000000, got '-1'",
        ),
        (
            "LOYALTY_DATABASE_URL",
            "mysql://x/y",
            # Never repeated: the URL may hold the database password.
            "LOYALTY_DATABASE_URL must be a postgresql:// URL",
        ),
        (
            "LOYALTY_GRPC_TARGET",
            "localhost",
            "LOYALTY_GRPC_TARGET must be HOST:PORT, got 'localhost'",
        ),
        (
            "LOYALTY_GATEWAY_UPSTREAMS",
            "a:1,a:1",
            "LOYALTY_GATEWAY_UPSTREAMS must be HOST:PORT, or several separated by commas "
            "(each once), got 'a:1,a:1'",
        ),
        (
            "LOYALTY_GATEWAY_UPSTREAMS",
            "a:1,,b:2",
            "LOYALTY_GATEWAY_UPSTREAMS must be HOST:PORT, or several separated by commas "
            "(each once), got 'a:1,,b:2'",
        ),
        (
            "LOYALTY_GRPC_HOST",
            "a host",
            "LOYALTY_GRPC_HOST must be a host name or IP address, got 'a host'",
        ),
        (
            "LOYALTY_WALLET_PROVIDER",
            "apple",
            "LOYALTY_WALLET_PROVIDER must be one of local, google, got 'apple'",
        ),
    ],
)
def test_a_wrong_value_is_named(variable: str, value: str, message: str):
    with pytest.raises(ConfigError) as exc:
        Settings.from_env({variable: value})
    assert str(exc.value) == message


def test_a_multi_host_database_url_is_accepted():
    url = "postgresql://u:p@db1:5432,db2:5433/loyalty?target_session_attrs=read-write"
    assert Settings.from_env({"LOYALTY_DATABASE_URL": url}).database_url == url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cr3t@db:port/loyalty",
        "postgresql://u:s3cr3t@db1:5432,[::1]:5433/loyalty",
        "postgresql://u:s3cr3t@db1,db2/loyalty?host=db3",
    ],
)
def test_a_database_url_that_does_not_parse_is_refused_without_its_password(url: str):
    with pytest.raises(ConfigError) as exc:
        Settings.from_env({"LOYALTY_DATABASE_URL": url})
    assert str(exc.value).startswith("LOYALTY_DATABASE_URL must be a postgresql:// URL: ")
    assert "s3cr3t" not in str(exc.value)


def test_the_admin_token_must_fit_in_metadata():
    with pytest.raises(ConfigError, match=r"^LOYALTY_ADMIN_TOKEN must be printable ASCII"):
        Settings.from_env({"LOYALTY_ADMIN_TOKEN": "café au lait"})


def test_wallet_variables_are_read_only_when_asked():
    assert Settings.from_env({"LOYALTY_WALLET_PROVIDER": "apple"}, wallet=False)


def test_flags_override_the_environment_and_are_checked_by_name():
    env = Settings.from_env({"LOYALTY_WORKERS": "4", "LOYALTY_GRPC_PORT": "6000"})
    settings = env.with_flags(workers="2", grpc_port=None, data_dir="~/x")
    assert (settings.workers, settings.grpc_port) == (2, 6000)
    assert settings.data_dir == Path("~/x").expanduser()
    with pytest.raises(ConfigError) as exc:
        env.with_flags(workers="0")
    assert str(exc.value) == "--workers must be an integer from 1 to 64, got '0'"


def test_every_variable_the_code_reads_is_documented_and_checked():
    read = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        read |= set(re.findall(r"LOYALTY_[A-Z_]*[A-Z](?![A-Z_*])", text))
    wallet = {
        name for name in documented_names() if "WALLET" in name
    }  # parsed by WalletSettings.from_env
    assert read <= documented_names(), sorted(read - documented_names())
    assert documented_names() == checked_names() | wallet


@pytest.mark.parametrize(
    ("argv", "variable"),
    [
        (["serve"], "LOYALTY_WORKERS"),
        (["up"], "LOYALTY_WORKERS"),
        (["status"], "LOYALTY_WORKERS"),
    ],
)
def test_the_cli_stops_before_starting_anything(
    argv: list[str],
    variable: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
):
    in_empty_folder(monkeypatch, tmp_path)
    monkeypatch.setenv(variable, "zero")
    assert main(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err == f"error: {variable} must be an integer from 1 to 64, got 'zero'\n"
    assert list(tmp_path.iterdir()) == []  # no data dir, nothing started


def test_a_bad_flag_is_a_config_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("LOYALTY_DATABASE_URL", raising=False)
    assert main(["serve", "--grpc-port", "http"]) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "error: --grpc-port must be a port number from 0 to 65535, got 'http'\n"
    )


def test_the_admin_token_comes_from_the_variable_or_a_file(tmp_path: Path):
    assert Settings.from_env({}).configured_admin_token() is None
    secret = tmp_path / "token"
    secret.write_text("from-the-file-0123456789\n", encoding="utf-8")
    by_file = Settings.from_env({"LOYALTY_ADMIN_TOKEN_FILE": str(secret)}, wallet=False)
    assert by_file.configured_admin_token() == "from-the-file-0123456789"
    both = Settings.from_env(
        {
            "LOYALTY_ADMIN_TOKEN": "from-the-variable-9876543210",
            "LOYALTY_ADMIN_TOKEN_FILE": str(secret),
        },
        wallet=False,
    )
    assert both.configured_admin_token() == "from-the-variable-9876543210"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "LOYALTY_ADMIN_TOKEN_FILE: cannot read {path}: No such file or directory"),
        ("", "LOYALTY_ADMIN_TOKEN_FILE: {path} must hold one token, printable ASCII"),
        ("two words", "LOYALTY_ADMIN_TOKEN_FILE: {path} must hold one token, printable ASCII"),
    ],
)
def test_a_bad_admin_token_file_is_named(tmp_path: Path, content: str | None, message: str):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    settings = Settings.from_env({"LOYALTY_ADMIN_TOKEN_FILE": str(path)}, wallet=False)
    with pytest.raises(ConfigError) as error:
        settings.configured_admin_token()
    assert str(error.value).startswith(message.format(path=path))


def test_serve_needs_a_configured_admin_token_and_starts_nothing_without_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    in_empty_folder(monkeypatch, tmp_path)
    monkeypatch.setenv("LOYALTY_DATABASE_URL", "postgresql://unused.invalid/x")
    monkeypatch.delenv("LOYALTY_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("LOYALTY_ADMIN_TOKEN_FILE", raising=False)
    monkeypatch.delenv("LOYALTY_PROG", raising=False)
    assert main(["serve"]) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "error: `loyalty serve` needs the back-office token, the same on every host: set "
        "LOYALTY_ADMIN_TOKEN or LOYALTY_ADMIN_TOKEN_FILE (`loyalty up` generates one for a "
        "single machine)\n"
    )
    assert list(tmp_path.iterdir()) == []  # no token generated, no data dir


def test_envoy_listens_where_told():
    assert Settings.from_env({}).http_host is None  # the gateway folder's (0.0.0.0)
    settings = Settings.from_env({"LOYALTY_HTTP_HOST": "10.0.0.5"}, wallet=False)
    assert settings.with_flags(http_host="127.0.0.2").http_host == "127.0.0.2"
    assert settings.http_host == "10.0.0.5"
    with pytest.raises(ConfigError, match="LOYALTY_HTTP_HOST must be a host name or IP"):
        Settings.from_env({"LOYALTY_HTTP_HOST": "a b"}, wallet=False)


def test_the_long_running_production_commands_log_json_by_default():
    settings = Settings.from_env({})
    formats = {
        command: settings.log_format_for(command)
        for command in ("serve", "gateway run", "up", "gateway reload", "admin", "status")
    }
    assert formats == {
        "serve": "json",
        "gateway run": "json",
        "up": "text",
        "gateway reload": "text",
        "admin": "text",
        "status": "text",
    }
    chosen = Settings.from_env({"LOYALTY_LOG_FORMAT": "text"})
    assert chosen.log_format_for("gateway run") == "text"


@pytest.mark.parametrize(
    ("environ", "target"),
    [
        ({}, "127.0.0.1:50051"),
        ({"LOYALTY_GRPC_PORT": "50052"}, "127.0.0.1:50052"),
        ({"LOYALTY_GRPC_HOST": "0.0.0.0", "LOYALTY_GRPC_PORT": "6000"}, "127.0.0.1:6000"),
        ({"LOYALTY_GRPC_HOST": "::"}, "[::1]:50051"),
        ({"LOYALTY_GRPC_HOST": "10.0.0.7"}, "10.0.0.7:50051"),
        ({"LOYALTY_GRPC_TARGET": "db1:7000", "LOYALTY_GRPC_PORT": "50052"}, "db1:7000"),
    ],
)
def test_client_commands_find_the_server_where_serve_listens(environ: dict[str, str], target: str):
    """admin, status and gateway run read the same settings as serve: without
    LOYALTY_GRPC_TARGET they talk to where `serve` would listen on this host."""
    assert Settings.from_env(environ, wallet=False).server_target == target


@pytest.mark.parametrize(
    ("environ", "upstreams"),
    [
        ({}, ("127.0.0.1:50051",)),
        ({"LOYALTY_GRPC_TARGET": "db1:7000"}, ("db1:7000",)),
        (
            {"LOYALTY_GATEWAY_UPSTREAMS": " s1:50051, [::1]:50052 ", "LOYALTY_GRPC_TARGET": "x:1"},
            ("s1:50051", "[::1]:50052"),
        ),
    ],
)
def test_the_gateway_forwards_to_its_upstreams_else_to_the_server_target(
    environ: dict[str, str], upstreams: tuple[str, ...]
):
    assert Settings.from_env(environ, wallet=False).upstreams == upstreams


def test_a_target_splits_and_joins_back():
    assert split_target("s1:50051") == ("s1", 50051)
    assert split_target("[::1]:50052") == ("::1", 50052)  # brackets gone: Envoy's address
    for target in ("s1:50051", "[::1]:50052", "10.0.0.1:1"):
        assert join_target(*split_target(target)) == target


def test_envoys_heap_budget_follows_the_machine_unless_set(monkeypatch: pytest.MonkeyPatch):
    from loyalty_grpc.runtime import settings as module

    gib = 1024**3
    assert default_envoy_heap_bytes(16 * gib) == 4 * gib
    assert default_envoy_heap_bytes(16 * gib + 123) == 4 * gib  # whole MiB
    assert default_envoy_heap_bytes(128 * 1024**2) == ENVOY_HEAP_MIN_MB * MIB  # the floor
    monkeypatch.setattr(module, "available_memory", lambda: 2 * gib)
    assert Settings.from_env({}).envoy_heap_mb is None
    assert Settings.from_env({}).envoy_heap_bytes == gib // 2
    settings = Settings.from_env({"LOYALTY_ENVOY_HEAP_MB": "300"}, wallet=False)
    assert settings.envoy_heap_bytes == 300 * MIB
    assert settings.with_flags(envoy_heap_mb="2048").envoy_heap_bytes == 2 * gib


@pytest.mark.parametrize("value", ["63", "0", "-1", "1.5", "lots", "1048577"])
def test_a_heap_budget_envoy_cannot_run_in_is_refused(value: str):
    with pytest.raises(ConfigError) as exc:
        Settings.from_env({"LOYALTY_ENVOY_HEAP_MB": value}, wallet=False)
    assert str(exc.value) == (
        f"LOYALTY_ENVOY_HEAP_MB must be a number of MiB from {ENVOY_HEAP_MIN_MB} "
        f"to 1048576, got {value!r}"
    )
    with pytest.raises(ConfigError, match=r"^--envoy-heap-mb must be a number of MiB"):
        Settings.from_env({}, wallet=False).with_flags(envoy_heap_mb=value)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("a", "at least 24 characters (it has 1)"),
        (
            "change-me-to-a-long-random-token",
            "a random secret, not the documented example value",
        ),
        ("t" * 32, "less predictable: its characters carry about 0 bits, at least 72"),
    ],
)
def test_a_weak_admin_token_is_refused_without_repeating_it(
    token: str, reason: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"LOYALTY_ADMIN_TOKEN": token}, wallet=False)
    assert str(error.value).startswith(f"LOYALTY_ADMIN_TOKEN must be {reason}")
    assert "got" not in str(error.value)
    assert len(token) < 4 or token not in str(error.value)
    path = tmp_path / "token"
    path.write_text(token + "\n", encoding="utf-8")
    settings = Settings.from_env({"LOYALTY_ADMIN_TOKEN_FILE": str(path)}, wallet=False)
    with pytest.raises(ConfigError) as error:
        settings.configured_admin_token()
    assert str(error.value).startswith(
        f"LOYALTY_ADMIN_TOKEN_FILE: {path} must hold one token, {reason}"
    )
    assert len(token) < 4 or token not in str(error.value)


@pytest.mark.parametrize("command", ["serve", "up", "admin"])
def test_a_weak_admin_token_stops_every_command_before_it_starts(
    command: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    in_empty_folder(monkeypatch, tmp_path)
    monkeypatch.setenv("LOYALTY_DATABASE_URL", "postgresql://unused.invalid/x")
    monkeypatch.setenv("LOYALTY_ADMIN_TOKEN", "change-me-to-a-long-random-token")
    argv = [command, *(["programs", "list"] if command == "admin" else [])]
    assert main(argv) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "error: LOYALTY_ADMIN_TOKEN must be a random secret, not the documented example value\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing started, no data dir


def test_up_refuses_a_weak_token_left_in_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    in_empty_folder(monkeypatch, tmp_path)
    monkeypatch.delenv("LOYALTY_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("LOYALTY_ADMIN_TOKEN_FILE", raising=False)
    (tmp_path / ".loyalty").mkdir()
    (tmp_path / ".loyalty" / "admin_token").write_text("secret\n", encoding="utf-8")
    assert main(["up"]) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "error: .loyalty/admin_token: the back-office token must be at least 24 characters "
        "(it has 6); delete the file and `up` generates one\n"
    )
    assert sorted(p.name for p in (tmp_path / ".loyalty").iterdir()) == ["admin_token"]


def test_plain_http_listens_on_loopback_and_tls_everywhere_by_default() -> None:
    settings = Settings.from_env({}, wallet=False)
    assert settings.http_host is None
    assert settings.gateway_listen_host(tls=False) == "127.0.0.1"
    assert settings.gateway_listen_host(tls=True) == "0.0.0.0"
    for host in ("127.0.0.2", "::1", "localhost"):
        assert settings.with_flags(http_host=host).gateway_listen_host(tls=False) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "pos.example.com"])
def test_plain_http_beyond_loopback_must_be_asked_for_by_name(host: str) -> None:
    settings = Settings.from_env({"LOYALTY_HTTP_HOST": host}, wallet=False)
    with pytest.raises(ConfigError) as refused:
        settings.gateway_listen_host(tls=False)
    assert str(refused.value).startswith(
        f"LOYALTY_HTTP_HOST (--http-host) {host} is beyond loopback and the gateway has no TLS"
    )
    assert "\n" not in str(refused.value)
    assert settings.gateway_listen_host(tls=True) == host
    allowed = Settings.from_env(
        {"LOYALTY_HTTP_HOST": host, "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK": "1"}, wallet=False
    )
    assert allowed.gateway_listen_host(tls=False) == host
    by_flag = settings.with_flags(plain_http_beyond_loopback="1")
    assert by_flag.gateway_listen_host(tls=False) == host


def test_the_beyond_loopback_switch_is_1_or_0() -> None:
    for text, value in (("1", True), ("true", True), ("0", False), ("no", False)):
        env = {"LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK": text}
        assert Settings.from_env(env, wallet=False).plain_http_beyond_loopback is value
    with pytest.raises(ConfigError) as wrong:
        Settings.from_env({"LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK": "sure"}, wallet=False)
    assert str(wrong.value) == "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK must be 1 or 0, got 'sure'"


@pytest.mark.parametrize(
    "argv",
    [
        ["up", "--http-host", "0.0.0.0"],
        ["gateway", "run", "--http-host", "0.0.0.0", "--work-dir", "envoy"],
    ],
)
def test_up_and_gateway_run_refuse_plain_http_beyond_loopback_before_starting(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    in_empty_folder(monkeypatch, tmp_path)
    for name in ("LOYALTY_TLS_CERT", "LOYALTY_TLS_KEY", "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK"):
        monkeypatch.delenv(name, raising=False)
    assert main(argv) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "error: LOYALTY_HTTP_HOST (--http-host) 0.0.0.0 is beyond loopback and the gateway "
        "has no TLS: API keys would cross the network in clear; set LOYALTY_TLS_CERT and "
        "LOYALTY_TLS_KEY, or LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK=1 "
        "(--plain-http-beyond-loopback) to accept that\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing started, no data or work dir


def test_envoy_metrics_listener_is_off_by_default_and_on_loopback() -> None:
    settings = Settings.from_env({}, wallet=False)
    assert (settings.envoy_metrics_port, settings.envoy_metrics_host) == (0, "127.0.0.1")
    env = {"LOYALTY_ENVOY_METRICS_PORT": "9901", "LOYALTY_ENVOY_METRICS_HOST": "0.0.0.0"}
    given = Settings.from_env(env, wallet=False)
    assert (given.envoy_metrics_port, given.envoy_metrics_host) == (9901, "0.0.0.0")
    assert given.with_flags(envoy_metrics_port="9902").envoy_metrics_port == 9902


def test_the_retired_admin_port_variable_says_what_replaced_it() -> None:
    """An environment file written for an earlier version would otherwise leave
    Prometheus scraping a port that no longer exists, silently."""
    with pytest.raises(ConfigError) as retired:
        Settings.from_env({"LOYALTY_ENVOY_ADMIN_PORT": "9901"}, wallet=False)
    assert str(retired.value) == (
        "LOYALTY_ENVOY_ADMIN_PORT is retired: Envoy's admin interface is a Unix socket of "
        "the work dir now (WORK_DIR/admin/envoy.sock, the gateway's user only); for "
        "Prometheus set LOYALTY_ENVOY_METRICS_PORT instead"
    )
    assert Settings.from_env({"LOYALTY_ENVOY_ADMIN_PORT": " "}, wallet=False)


def test_the_worker_checks_follow_the_environment() -> None:
    assert Settings().liveness == LivenessSettings()
    settings = Settings.from_env(
        {
            "LOYALTY_WORKER_CHECK_SECONDS": "0.5",
            "LOYALTY_WORKER_CHECK_DEADLINE_SECONDS": "1.5",
            "LOYALTY_WORKER_CHECK_MISSES": "4",
        },
        wallet=False,
    )
    assert settings.liveness == LivenessSettings(interval=0.5, deadline=1.5, misses=4)
    off = Settings.from_env({"LOYALTY_WORKER_CHECK_SECONDS": "0"}, wallet=False)
    assert not off.liveness.enabled
