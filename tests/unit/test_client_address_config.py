"""The client address in the gateway's configuration (runtime/gateway/checks.py): every
HTTP listener's route table sets `x-loyalty-client-address` from Envoy's view of the
client, that view is the TCP peer unless trusted proxies are rendered, and anything else
is refused; the settings that carry the trusted proxies and the limit on failed key checks.

(Envoy runs it: tests/e2e/test_client_address.py.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.api import failed_checks
from loyalty_grpc.api.gateway_protocol import CLIENT_ADDRESS_KEY
from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.runtime.gateway import checks as envoy_checks
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway import shape as envoy_shape
from loyalty_grpc.runtime.gateway import xds as envoy_xds
from loyalty_grpc.runtime.process.serving import server_settings
from loyalty_grpc.runtime.settings import ConfigError, Settings
from tests.gateway_specs import ADMIN_SOCKET, GATEWAY, gateway_copy, hcm, spec

TRUSTED = ("10.0.0.0/8", "2001:db8::/32")


def managers(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        network_filter["typed_config"]
        for listener in config["static_resources"]["listeners"]
        for chain in listener["filter_chains"]
        for network_filter in chain["filters"]
        if network_filter["name"] == envoy_shape.HCM_FILTER
    ]


def test_the_route_table_sets_the_client_address_from_the_tcp_peer() -> None:
    config = yaml.safe_load((GATEWAY / "envoy.yaml").read_text(encoding="utf-8"))
    manager = hcm(config)
    assert envoy_checks.client_address_header() == {
        "header": {
            "key": CLIENT_ADDRESS_KEY,
            "value": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
        },
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    assert envoy_checks.client_address_header() in manager["route_config"]["request_headers_to_add"]
    assert manager["use_remote_address"] is True
    assert "xff_num_trusted_hops" not in manager
    assert "original_ip_detection_extensions" not in manager
    mentions = json.dumps(manager["route_config"]["virtual_hosts"]).lower()
    assert CLIENT_ADDRESS_KEY not in mentions
    envoy_checks.check_client_address(config)


def test_every_rendering_and_xds_generation_carries_it(tmp_path: Path) -> None:
    plain = spec()
    trusted = dataclasses.replace(plain, trusted_proxies=TRUSTED)
    for gateway in (plain, trusted):
        generation = envoy_xds.render_generation(gateway, envoy_xds.WorkDir(tmp_path / "w"))
        for config in (gateway.render(admin_socket=ADMIN_SOCKET), generation.static):
            envoy_checks.check_client_address(config)
    with_redirect = envoy_config.render_config(
        http_port=8443,
        upstreams=("127.0.0.1:50051",),
        admin_socket=ADMIN_SOCKET,
        tls_secret_path=tmp_path / "secret.yaml",
        redirect_port=8080,
        public_host="pos.example.com",
    )
    assert len(managers(with_redirect)) == 2
    envoy_checks.check_client_address(with_redirect)


def test_trusted_proxies_render_the_xff_detection() -> None:
    config = dataclasses.replace(spec(), trusted_proxies=TRUSTED).render(admin_socket=ADMIN_SOCKET)
    manager = hcm(config)
    assert manager["use_remote_address"] is False  # Envoy refuses both at once
    assert manager["original_ip_detection_extensions"] == [
        {
            "name": "envoy.extensions.http.original_ip_detection.xff",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.http.original_ip_detection."
                "xff.v3.XffConfig",
                "xff_trusted_cidrs": {
                    "cidrs": [
                        {"address_prefix": "10.0.0.0", "prefix_len": 8},
                        {"address_prefix": "2001:db8::", "prefix_len": 32},
                    ]
                },
            },
        }
    ]
    # A client's own x-request-id goes before the connection manager makes one.
    (mutation,) = manager["early_header_mutation_extensions"]
    assert mutation["typed_config"]["mutations"] == [{"remove": "x-request-id"}]
    # Nothing else changes.
    plain = hcm(spec().render(admin_socket=ADMIN_SOCKET))
    rest = {
        k: v
        for k, v in manager.items()
        if k
        not in (
            "use_remote_address",
            "original_ip_detection_extensions",
            "early_header_mutation_extensions",
        )
    }
    assert rest == {k: v for k, v in plain.items() if k != "use_remote_address"}


def test_the_spec_keeps_its_trusted_proxies() -> None:
    gateway = dataclasses.replace(spec(), trusted_proxies=TRUSTED)
    assert envoy_config.GatewaySpec.from_json(gateway.to_json()) == gateway
    older = json.loads(spec().to_json())
    del older["trusted_proxies"]  # written before the field existed
    assert envoy_config.GatewaySpec.from_json(json.dumps(older)).trusted_proxies == ()


def _refused(tmp_path: Path, change: str) -> None:
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    manager = hcm(config)
    table = manager["route_config"]["request_headers_to_add"]
    (entry,) = [e for e in table if e["header"]["key"] == CLIENT_ADDRESS_KEY]
    if change == "no header":
        table.remove(entry)
    elif change == "another value":
        entry["header"]["value"] = "%REQ(X-FORWARDED-FOR)%"
    elif change == "appended":
        entry["append_action"] = "APPEND_IF_EXISTS_OR_ADD"
    elif change == "twice":
        table.append({**entry, "append_action": "ADD_IF_ABSENT"})
    elif change == "xff trusted":
        manager["use_remote_address"] = False
    elif change == "trusted hops":
        manager["xff_num_trusted_hops"] = 1
    else:  # a detection of its own in envoy.yaml
        manager["original_ip_detection_extensions"] = [envoy_checks.xff_detection(TRUSTED)]
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(envoy_shape.EnvoyError, match="client address"):
        spec(gateway).render(admin_socket=ADMIN_SOCKET)
    with pytest.raises(envoy_shape.EnvoyError, match="client address"):
        envoy_xds.install(spec(gateway), tmp_path / "work")
    assert not envoy_xds.WorkDir(tmp_path / "work").listeners.exists()


@pytest.mark.parametrize(
    "change",
    [
        "no header",
        "another value",
        "appended",
        "twice",
        "xff trusted",
        "trusted hops",
        "own detection",
    ],
)
def test_a_config_that_could_take_the_address_from_a_client_is_refused(
    tmp_path: Path, change: str
) -> None:
    _refused(tmp_path, change)


# ---------------------------------------------------------------- settings


def test_trusted_proxies_settings() -> None:
    assert Settings.from_env({}).trusted_proxies == ()
    settings = Settings.from_env({"LOYALTY_TRUSTED_PROXIES": "10.1.2.3/8, 192.0.2.7,::1"})
    assert settings.trusted_proxies == ("10.0.0.0/8", "192.0.2.7/32", "::1/128")
    flagged = settings.with_flags(trusted_proxies="2001:db8::/32")
    assert flagged.trusted_proxies == ("2001:db8::/32",)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.0.0.0/0", "narrower than 0.0.0.0/0"),
        ("::/0", "narrower than ::/0"),
        ("10.0.0.0/8,proxy.example", "separated by commas"),
        ("10.0.0.0/33", "separated by commas"),
    ],
)
def test_trusted_proxies_that_trust_anyone_or_nothing_readable_are_refused(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"LOYALTY_TRUSTED_PROXIES must be CIDRs {message}"):
        Settings.from_env({"LOYALTY_TRUSTED_PROXIES": value})


def test_failed_key_checks_setting_reaches_the_server() -> None:
    default = Settings.from_env({})
    assert default.failed_key_checks_per_minute == failed_checks.DEFAULT_LIMIT
    assert ServerSettings(database_url="x", admin_token="t").failed_key_checks_per_minute == (
        failed_checks.DEFAULT_LIMIT
    )
    assert 60 <= failed_checks.DEFAULT_LIMIT <= 100
    settings = Settings.from_env({"LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE": "0"})
    assert settings.failed_key_checks_per_minute == 0
    server = server_settings(settings, database_url="postgresql://x", admin_token="t")
    assert server.failed_key_checks_per_minute == 0
    with pytest.raises(ConfigError, match="LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE must be"):
        Settings.from_env({"LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE": "-1"})
