"""Issue 24 §5: what `gateway reload --gateway-dir` applied outlives a restart of
`loyalty gateway run` (runtime/gateway/reloaded.py). A real `gateway run` in front of the
stack's gRPC server is reloaded onto a new folder, SIGKILLed (as a crash; systemd's
`Restart=` then runs the same command again) and started again: the new folder is in
force. A clean stop and start keeps it too; a start command that names another folder
wins over the reload."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from loyalty_grpc.runtime.gateway.config import find_gateway_dir
from tests.e2e.processes import LOYALTY, Running, loyalty_env
from tests.e2e.stack import Stack
from tests.e2e.test_gateway_reload import ROUTE, ROUTE_BODY, add_route, edit_config, envoy_pids
from tests.support import free_port

STARTED = "Envoy (pid "
# Generous bounds, not measurements.
ENVOY_GONE_WITHIN = 30.0


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.program("reinicio", fans=[])["ping"]


def _folder(tmp_path: Path, name: str, *, with_route: bool) -> Path:
    folder = Path(shutil.copytree(find_gateway_dir(), tmp_path / name))
    if with_route:
        edit_config(folder, add_route)
    return folder


class Gateway:
    """`loyalty gateway run` with one command line, started as often as needed."""

    def __init__(self, stack: Stack, work_dir: Path, gateway_dir: Path, cwd: Path) -> None:
        self.port = free_port()
        self.work_dir = work_dir
        self.cwd = cwd
        self.args = self.command(stack, gateway_dir)
        self.url = f"http://127.0.0.1:{self.port}"

    def command(self, stack: Stack, gateway_dir: Path) -> list[str]:
        return [
            "--log-format",
            "text",
            "gateway",
            "run",
            "--upstream",
            stack.grpc_target,
            "--http-port",
            str(self.port),
            "--work-dir",
            str(self.work_dir),
            "--gateway-dir",
            str(gateway_dir),
        ]

    def start(self) -> Running:
        running = Running(self.args, cwd=self.cwd, env=loyalty_env())
        running.wait_for(STARTED)
        return running

    def route(self) -> httpx.Response:
        return httpx.get(self.url + ROUTE, timeout=10)

    def ping(self, key: str) -> httpx.Response:
        return httpx.get(
            self.url + "/api/v1/ping", headers={"Authorization": f"Bearer {key}"}, timeout=10
        )


def _reload(work_dir: Path, gateway_dir: Path) -> None:
    result = subprocess.run(
        [
            *LOYALTY,
            "gateway",
            "reload",
            "--work-dir",
            str(work_dir),
            "--gateway-dir",
            str(gateway_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=loyalty_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _wait_envoy_gone(work_dir: Path) -> None:
    """The killed command's Envoy exits by itself (its parent-death signal)."""
    deadline = time.monotonic() + ENVOY_GONE_WITHIN
    while envoy_pids(work_dir.resolve() / "bootstrap.yaml"):
        assert time.monotonic() < deadline, "Envoy outlived its killed `gateway run`"
        time.sleep(0.05)


def _said(running: Running, text: str) -> bool:
    return any(text in line for line in running.lines)


def test_a_reloaded_folder_outlives_a_restart(stack: Stack, key: str, tmp_path: Path):
    first = _folder(tmp_path, "gateway-a", with_route=False)
    second = _folder(tmp_path, "gateway-b", with_route=True)
    gateway = Gateway(stack, tmp_path / "envoy", first, tmp_path)

    running = gateway.start()
    try:
        assert gateway.route().status_code == 404
        _reload(gateway.work_dir, second)
        assert (gateway.route().status_code, gateway.route().text) == (200, ROUTE_BODY)
    finally:
        running.stop(signal.SIGKILL)  # a crash: nothing cleans up
    _wait_envoy_gone(gateway.work_dir)

    # The same command again (systemd's Restart=): the reloaded folder is in force.
    running = gateway.start()
    try:
        assert _said(running, f"gateway folder {second.resolve()}, set by `gateway reload` at ")
        assert (gateway.route().status_code, gateway.route().text) == (200, ROUTE_BODY)
        assert gateway.ping(key).json()["ok"] is True
    finally:
        assert running.stop() == 0  # a clean stop (systemctl stop / restart)

    running = gateway.start()
    try:
        assert (gateway.route().status_code, gateway.route().text) == (200, ROUTE_BODY)
    finally:
        assert running.stop() == 0


def test_a_changed_start_command_wins_over_an_earlier_reload(
    stack: Stack, key: str, tmp_path: Path
):
    first = _folder(tmp_path, "gateway-a", with_route=False)
    second = _folder(tmp_path, "gateway-b", with_route=True)
    third = _folder(tmp_path, "gateway-c", with_route=False)
    gateway = Gateway(stack, tmp_path / "envoy", first, tmp_path)
    running = gateway.start()
    try:
        _reload(gateway.work_dir, second)
        assert gateway.route().status_code == 200
    finally:
        assert running.stop() == 0

    # The operator put another folder in the unit's ExecStart since the reload.
    gateway.args = gateway.command(stack, third)
    running = gateway.start()
    try:
        assert _said(running, f"gateway folder {third.resolve()} as the start command says")
        assert gateway.route().status_code == 404
        assert gateway.ping(key).json()["ok"] is True
    finally:
        assert running.stop() == 0
    # Forgotten for good: the first command again serves its own folder.
    gateway.args = gateway.command(stack, first)
    running = gateway.start()
    try:
        assert not _said(running, "`gateway reload` set")
        assert not _said(running, "set by `gateway reload`")
        assert gateway.route().status_code == 404
    finally:
        assert running.stop() == 0
