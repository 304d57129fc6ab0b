"""How `loyalty status` and `gateway reload` word Envoy's view of the gateway
(runtime/gateway/admin.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loyalty_grpc.runtime.cli.status import gateway_lines
from loyalty_grpc.runtime.gateway.admin import EnvoyAdmin
from loyalty_grpc.runtime.gateway.admin import address_text as _address
from loyalty_grpc.runtime.gateway.admin import host_health as _host_health
from loyalty_grpc.runtime.gateway.xds import WorkDir


def test_an_upstream_host_is_healthy_or_says_why_not() -> None:
    assert _host_health({"eds_health_status": "HEALTHY"}) == "healthy"
    assert _host_health({}) == "healthy"
    assert (
        _host_health({"eds_health_status": "HEALTHY", "failed_active_health_check": True})
        == "failed_active_health_check"
    )
    assert (
        _host_health({"eds_health_status": "UNHEALTHY", "failed_outlier_check": True})
        == "unhealthy, failed_outlier_check"
    )


def test_addresses_as_an_operator_types_them() -> None:
    assert _address({"socket_address": {"address": "0.0.0.0", "port_value": 8080}}) == (
        "0.0.0.0:8080"
    )
    assert _address({"socket_address": {"address": "::1", "port_value": 50051}}) == ("[::1]:50051")
    assert _address(None) == "?:?"


def test_status_without_a_gateway_or_without_the_right_to_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No socket: no gateway (not a fault, and nothing there). A socket this user may not
    open (the admin socket is the gateway user's, mode 0600): said, and unhealthy."""
    work = WorkDir(tmp_path / "envoy")
    part = gateway_lines(work.path)
    (line,) = part.lines
    assert (line.name, line.ok, part.present) == ("gateway", True, False)
    assert line.value == f"none running from {work.path}"

    def denied(self: EnvoyAdmin, path: str) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(EnvoyAdmin, "get", denied)
    part = gateway_lines(work.path)
    (line,) = part.lines
    assert not line.ok
    assert part.present
    assert line.value == (
        f"admin socket {work.admin_socket}: permission denied (run status as the gateway's user)"
    )


def test_the_admin_address_file_of_an_earlier_version(tmp_path: Path) -> None:
    """A work dir of an earlier version (admin on a TCP port, its address file left): while
    something listens at that address its gateway may still run (restart it); once nothing
    does, the file is a left-over of a stopped gateway: nothing runs, and nothing is wrong."""
    work = WorkDir(tmp_path / "envoy")
    work.path.mkdir(parents=True)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        work.legacy_admin_address.write_text(address + "\n", encoding="utf-8")
        part = gateway_lines(work.path)
    (line,) = part.lines
    assert not line.ok
    assert part.present
    assert "by an older version (admin on a TCP port): restart it" in line.value

    # The same port, closed now: nothing listens there.
    part = gateway_lines(work.path)
    (line,) = part.lines
    assert line.ok
    assert not part.present
    assert line.value == (
        f"none running from {work.path} (admin_address of an older version's stopped "
        f"gateway left there: nothing listens at {address})"
    )

    work.legacy_admin_address.write_text("not an address\n", encoding="utf-8")
    part = gateway_lines(work.path)
    assert part.present
    assert not part.lines[0].ok


def test_a_gateway_started_and_not_stopped_cleanly_is_missing(tmp_path: Path) -> None:
    """Its gateway.json is still there (a clean stop removes it) and no Envoy answers:
    the gateway should be serving and is not (its `gateway run` was killed, or Envoy is
    being restarted): UNHEALTHY, not "none running"."""
    work = WorkDir(tmp_path / "envoy")
    work.path.mkdir(parents=True)
    work.spec.write_text("{}", encoding="utf-8")
    part = gateway_lines(work.path)
    (line,) = part.lines
    assert (line.ok, part.present) == (False, True)
    assert line.value.startswith(
        f"missing: started from {work.path} and not stopped cleanly, but no Envoy answers "
        f"on {work.admin_socket} (its `gateway run` or `up` was killed"
    )


def test_status_finds_the_work_dir_a_gateway_run_named(tmp_path: Path) -> None:
    """`gateway run --work-dir elsewhere` with a data dir names it there; `status` on the
    data dir checks that work dir (and expects a gateway there) unless --work-dir names
    another."""
    from loyalty_grpc.runtime.cli.status import _gateway_work_dir
    from loyalty_grpc.runtime.gateway.registered import register, registered, unregister

    data_dir, elsewhere = tmp_path / "data", tmp_path / "gateway" / "envoy"
    assert _gateway_work_dir(data_dir, None) == (data_dir / "envoy", None)
    register(data_dir, elsewhere)
    assert registered(data_dir) == elsewhere.resolve()
    work_dir, expected_by = _gateway_work_dir(data_dir, None)
    assert work_dir == elsewhere.resolve()
    assert expected_by == (
        f"a `gateway run` with data dir {data_dir} ({data_dir / 'gateway-run.json'})"
    )
    assert _gateway_work_dir(data_dir, elsewhere)[1] is not None
    assert _gateway_work_dir(data_dir, tmp_path / "other") == (tmp_path / "other", None)
    unregister(data_dir, tmp_path / "other")  # names another: left alone
    assert registered(data_dir) == elsewhere.resolve()
    unregister(data_dir, elsewhere)
    assert registered(data_dir) is None
