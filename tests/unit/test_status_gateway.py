"""How `loyalty status` and `gateway reload` word Envoy's view of the gateway
(runtime/gateway/admin.py)."""

from __future__ import annotations

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
    """No socket: no gateway (not a fault). A socket this user may not open (the admin
    socket is the gateway user's, mode 0600): said, and unhealthy. A work dir of an
    earlier version (admin on a TCP port, its address file left): restart it."""
    work = WorkDir(tmp_path / "envoy")
    (line,) = gateway_lines(work.path)
    assert (line.name, line.ok) == ("gateway", True)
    assert line.value == f"none running from {work.path}"

    def denied(self: EnvoyAdmin, path: str) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(EnvoyAdmin, "get", denied)
    (line,) = gateway_lines(work.path)
    assert not line.ok
    assert line.value == (
        f"admin socket {work.admin_socket}: permission denied (run status as the gateway's user)"
    )
    monkeypatch.undo()
    work.path.mkdir(parents=True)
    work.legacy_admin_address.write_text("127.0.0.1:9901\n", encoding="utf-8")
    (line,) = gateway_lines(work.path)
    assert not line.ok
    assert "by an older version (admin on a TCP port): restart it" in line.value
