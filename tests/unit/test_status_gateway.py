"""How `loyalty status` and `gateway reload` word Envoy's view of the gateway
(runtime/gateway/admin.py)."""

from __future__ import annotations

from loyalty_grpc.runtime.gateway.admin import address_text as _address
from loyalty_grpc.runtime.gateway.admin import host_health as _host_health


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
