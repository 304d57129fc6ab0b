"""deploy/systemd/: the units a bare host runs, checked by systemd itself where it is
installed (`systemd-analyze verify`), their commands by the CLI's own parser, and the
example environment file by the settings' checks."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loyalty_grpc.runtime.cli import build_parser
from loyalty_grpc.runtime.settings import Settings, documented_names

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/loyalty/venv/bin/loyalty"  # where the units expect the package
SERVICES = sorted(UNITS.glob("*.service"))


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


def test_there_is_a_unit_for_the_server_and_one_for_the_gateway() -> None:
    assert [path.name for path in SERVICES] == [
        "loyalty-gateway.service",
        "loyalty-serve.service",
    ]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("unit", SERVICES, ids=lambda path: path.name)
def test_systemd_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    """As installed, with this checkout's `loyalty` standing in for /opt/loyalty/venv's
    (verify insists that the command exists)."""
    command = Path(sys.executable).with_name("loyalty")
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text(encoding="utf-8").replace(INSTALLED, str(command)))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
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
            assert program == INSTALLED
            build_parser().parse_args(args)  # exits (SystemExit) on an unknown flag
    assert service["KillSignal"] == ["SIGTERM"]  # the rolling stop
    assert service["Restart"] == ["always"]


def test_the_example_environment_is_documented_and_valid() -> None:
    values = dict(
        line.split("=", 1)
        for line in (UNITS / "loyalty.env.example").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    assert set(values) <= documented_names()
    assert "LOYALTY_ADMIN_TOKEN" not in values  # a credential file, not the environment
    Settings.from_env(values)  # raises ConfigError naming a wrong value


def test_the_server_reads_the_token_from_the_credential() -> None:
    service = _unit(UNITS / "loyalty-serve.service")["Service"]
    assert service["LoadCredential"] == ["admin_token:/etc/loyalty/admin_token"]
    assert "LOYALTY_ADMIN_TOKEN_FILE=%d/admin_token" in service["Environment"]
