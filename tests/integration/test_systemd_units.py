"""deploy/systemd/: the units a bare host runs, checked by systemd itself where it is
installed (`systemd-analyze verify`; the template loyalty-serve@.service as its instances),
their commands by the CLI's own parser, and the example environment files by the settings'
checks; the two slots of the template as `serve` would see them: one port, a data dir and a
metrics port each."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loyalty_grpc.runtime.cli.parser import build_parser
from loyalty_grpc.runtime.settings import ConfigError, Settings, documented_names
from loyalty_grpc.store.db import parse_url

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/loyalty/venv/bin/loyalty"  # where the units expect the package
SLOT_INSTALLED = "/opt/loyalty/venv-%i/bin/loyalty"  # the template's: a virtualenv per slot
SERVICES = sorted(UNITS.glob("*.service"))
TEMPLATE = UNITS / "loyalty-serve@.service"
SLOTS = ("blue", "green")
# What systemd verifies and runs: a unit, or a template as each of its instances.
INSTANCES = [
    (unit, unit.name.replace("@.", f"@{slot}.") if "@." in unit.name else unit.name)
    for unit in SERVICES
    for slot in (SLOTS if "@." in unit.name else SLOTS[:1])
]


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value set (systemd allows a key several times)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith("#"):
            key, value = line.split("=", 1)
            current.setdefault(key, []).append(value)
    return sections


def test_there_are_units_for_the_server_its_two_slots_and_the_gateway() -> None:
    assert [path.name for path in SERVICES] == [
        "loyalty-gateway.service",
        "loyalty-serve.service",
        "loyalty-serve@.service",
    ]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize(("unit", "name"), INSTANCES, ids=[name for _, name in INSTANCES])
def test_systemd_accepts_the_unit(unit: Path, name: str, tmp_path: Path) -> None:
    """As installed, with this checkout's `loyalty` standing in for /opt/loyalty/venv's
    (verify insists that the command exists); a template as an instance, which systemd
    loads from the template's file beside it."""
    command = str(Path(sys.executable).with_name("loyalty"))
    text = unit.read_text(encoding="utf-8")
    copy = tmp_path / unit.name
    copy.write_text(text.replace(INSTALLED, command).replace(SLOT_INSTALLED, command))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("unit", SERVICES, ids=lambda path: path.name)
def test_the_unit_commands_are_loyalty_commands(unit: Path) -> None:
    service = _unit(unit)["Service"]
    for key in ("ExecStart", "ExecReload"):
        for command in service.get(key, []):
            program, *args = shlex.split(command)
            assert program == (SLOT_INSTALLED if unit == TEMPLATE else INSTALLED)
            build_parser().parse_args(args)  # exits (SystemExit) on an unknown flag
    assert service["KillSignal"] == ["SIGTERM"]  # the rolling stop
    assert service["Restart"] == ["always"]


def _environment(name: str) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (UNITS / name).read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )


def test_there_is_an_example_environment_per_slot() -> None:
    assert sorted(path.name for path in UNITS.glob("*.env.example")) == [
        "loyalty.env.example",
        *(f"serve-{slot}.env.example" for slot in SLOTS),
    ]


@pytest.mark.parametrize("name", sorted(path.name for path in UNITS.glob("*.env.example")))
def test_the_example_environment_is_documented_and_valid(name: str) -> None:
    values = _environment(name)
    assert set(values) <= documented_names()
    assert "LOYALTY_ADMIN_TOKEN" not in values  # a credential file, not the environment
    Settings.from_env(values)  # raises ConfigError naming a wrong value


@pytest.mark.parametrize(
    "unit", [UNITS / "loyalty-serve.service", TEMPLATE], ids=lambda path: path.name
)
def test_the_server_reads_its_secrets_from_credentials(unit: Path) -> None:
    """The admin token and the database password: systemd credentials, never variables."""
    service = _unit(unit)["Service"]
    assert service["LoadCredential"] == [
        "admin_token:/etc/loyalty/admin_token",
        "database_password:/etc/loyalty/database_password",
    ]
    assert "LOYALTY_ADMIN_TOKEN_FILE=%d/admin_token" in service["Environment"]
    assert "LOYALTY_DATABASE_PASSWORD_FILE=%d/database_password" in service["Environment"]


def test_the_example_database_url_has_no_password_and_checks_the_server(tmp_path: Path) -> None:
    """loyalty.env is a plain file: the URL holds no password (the credential does), and
    TLS checks the server's name and its CA (sslmode=verify-full). With the credential
    file the settings put the password in."""
    values = _environment("loyalty.env.example")
    url = parse_url(values["LOYALTY_DATABASE_URL"])
    assert url.password is None
    assert url.username == "loyalty"
    assert url.database == "loyalty"
    assert url.query["sslmode"] == "verify-full"
    assert str(url.query["sslrootcert"]).startswith("/etc/loyalty/")
    assert "LOYALTY_DATABASE_PASSWORD_FILE" not in values  # the unit sets it, to %d/…
    credential = tmp_path / "database_password"
    credential.write_text("from-the-credential\n", encoding="utf-8")
    settings = Settings.from_env(
        {**values, "LOYALTY_DATABASE_PASSWORD_FILE": str(credential)}, wallet=False
    )
    assert settings.database_url is not None
    assert parse_url(settings.database_url).password == "from-the-credential"


def test_a_slot_runs_as_the_single_server_does() -> None:
    """The same user, credential, stop, restart and hardening as loyalty-serve.service;
    only where its settings, data and program come from differ."""
    own = {"EnvironmentFile", "Environment", "StateDirectory", "WorkingDirectory", "ExecStart"}
    single, slot = _unit(UNITS / "loyalty-serve.service"), _unit(TEMPLATE)
    assert {key: value for key, value in slot["Service"].items() if key not in own} == {
        key: value for key, value in single["Service"].items() if key not in own
    }
    # SIGTERM to `serve` only, which stops its workers one by one (the rolling stop).
    assert slot["Service"]["KillMode"] == ["mixed"]
    assert slot["Install"] == single["Install"]
    assert slot["Unit"]["After"] == single["Unit"]["After"]


def _slot(slot: str) -> tuple[Settings, dict[str, list[str]]]:
    """What `serve` in this slot runs with: the slot's command line over its environment
    files (the examples, in the unit's order: a later file wins), as cli.main reads them."""
    service = {
        key: [value.replace("%i", slot) for value in values]
        for key, values in _unit(TEMPLATE)["Service"].items()
    }
    environment: dict[str, str] = {}
    for path in service["EnvironmentFile"]:
        assert path.startswith("/etc/loyalty/")
        environment |= _environment(Path(path).name + ".example")
    [command] = service["ExecStart"]
    program, *args = shlex.split(command)
    assert program == SLOT_INSTALLED.replace("%i", slot)
    parsed = build_parser().parse_args(args)
    assert parsed.command == "serve"
    assert parsed.share_port  # joins the other slot's SO_REUSEPORT group on the port
    flags = ("data_dir", "grpc_host", "grpc_port", "workers", "metrics_port")
    settings = Settings.from_env(environment).with_flags(
        **{name: getattr(parsed, name) for name in flags}
    )
    return settings, service


def test_the_slots_share_the_port_each_with_its_own_data_dir_and_metrics_port() -> None:
    slots = [_slot(slot) for slot in SLOTS]
    for settings, service in slots:
        # The data dir is the slot's StateDirectory (systemd creates it for the user).
        assert [f"/var/lib/{directory}" for directory in service["StateDirectory"]] == [
            str(settings.data_dir)
        ]
        assert service["WorkingDirectory"] == [str(settings.data_dir)]
        assert settings.metrics_port != 0  # how to tell when a slot serves (docs/deployment.md)
    ports = {(settings.listen_host, settings.grpc_port) for settings, _ in slots}
    assert len(ports) == 1
    assert len({settings.data_dir for settings, _ in slots}) == len(SLOTS)
    assert len({settings.metrics_port for settings, _ in slots}) == len(SLOTS)
    # Blue keeps loyalty-serve.service's /metrics, so green is the slot to start beside
    # that one when switching over from it (docs/deployment.md).
    single = Settings.from_env(_environment("loyalty.env.example"))
    assert slots[0][0].metrics_port == single.metrics_port


def test_the_gateway_serves_https_beyond_loopback_and_plain_http_only_on_loopback() -> None:
    """The example the gateway unit reads says how keys travel: HTTPS on every interface.
    The same file without its TLS lines falls back to plain HTTP, which is refused beyond
    loopback (exit 2) unless the operator adds the setting by name."""
    values = _environment("loyalty.env.example")
    settings = Settings.from_env(values)
    assert settings.tls_cert is not None
    assert settings.tls_key is not None
    assert settings.gateway_listen_host(tls=True) == "0.0.0.0"
    plain = {k: v for k, v in values.items() if not k.startswith("LOYALTY_TLS_")}
    with pytest.raises(ConfigError, match="is beyond loopback and the gateway has no TLS"):
        Settings.from_env(plain).gateway_listen_host(tls=False)
    del plain["LOYALTY_HTTP_HOST"]
    assert Settings.from_env(plain).gateway_listen_host(tls=False) == "127.0.0.1"
    chosen = plain | {"LOYALTY_HTTP_HOST": "0.0.0.0", "LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK": "1"}
    assert Settings.from_env(chosen).gateway_listen_host(tls=False) == "0.0.0.0"
