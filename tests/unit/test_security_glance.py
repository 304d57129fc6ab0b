"""docs/security.md's "At a glance" table repeats figures that live in the code: each row
is compared here with the module (or gateway/envoy.yaml) that states it, so that changing
a limit without the page fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.api import edge_limits, failed_checks, key_cache
from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain import detalle, secret_strength
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.runtime import settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
ENVOY = ROOT / "gateway" / "envoy.yaml"
KiB, MiB = 1024, 1024 * 1024


def glance() -> dict[str, str]:
    """The table's rows: first cell -> the whole row."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## At a glance")
    section = text[start : text.index("\n## ", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    return {row.split(" | ")[0].removeprefix("| "): row for row in rows}


def row(label: str) -> str:
    found = [text for first, text in glance().items() if first.startswith(label)]
    assert len(found) == 1, f"no single row starts with {label!r}"
    return found[0]


def envoy() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(ENVOY.read_text(encoding="utf-8"))
    return config


def manager() -> dict[str, Any]:
    listener = envoy()["static_resources"]["listeners"][0]
    typed: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return typed


def seconds(duration: str) -> str:
    return f"{float(duration.removesuffix('s')):g} s"


def limit(binding: str) -> str:
    return f"{edge_limits.BINDINGS[binding].limit:,}"


def test_body_and_parse_limits_are_api_edge_limits() -> None:
    body = " / ".join(
        limit(b)
        for b in (
            "POST /api/v1/tx",
            "POST /api/v1/fan/resolve",
            "POST /api/v1/redeem",
            "POST /api/v1/codes",
        )
    )
    assert limit("POST /api/v1/ping") == limit("POST /api/v1/roster")
    assert f"{body} / {limit('POST /api/v1/ping')} bytes / none" in row("Body of")
    shape = row("JSON body shape")
    assert f"at most {edge_limits.MAX_MEMBERS} members per object" in shape
    assert f"and {edge_limits.MAX_DEPTH} levels" in shape
    assert f"at most {MAX_CODIGOS} (`redeem`) / {MAX_CODES_PER_CALL:,} (`codes`)" in shape
    listener = envoy()["static_resources"]["listeners"][0]
    read = listener["per_connection_buffer_limit_bytes"] // KiB
    assert f"{read} KiB at a time" in row("A client connection is read")


def test_key_limits_are_the_servers() -> None:
    assert f"{failed_checks.DEFAULT_LIMIT} per minute" in row("Failed key checks")
    assert f"{failed_checks.WINDOW_SECONDS:g}" == "60"
    known = row("Keys that worked")
    assert f"{key_cache.REMEMBER_SECONDS / 3600:g} h in the server" in known
    gateway = edge_limits.KNOWN_KEY_SECONDS // 60
    assert f"{gateway // 2}–{gateway} min in the gateway" in known
    cache = row("API-key cache")
    assert f"{key_cache.DEFAULT_TTL_SECONDS:g} s; {key_cache.MAX_ENTRIES:,} valid" in cache
    assert f"{key_cache.MAX_ENTRIES:,} misses" in cache
    assert f"{settings.Settings().rate_limit_per_minute} a minute" in row("Calls per key")


def test_timeouts_and_http2_are_envoy_yamls() -> None:
    hcm = manager()
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    forwarded = {r["route"]["timeout"] for r in routes if "route" in r}
    assert len(forwarded) == 1
    times = " / ".join(
        seconds(t)
        for t in (
            hcm["request_headers_timeout"],
            hcm["request_timeout"],
            hcm["stream_idle_timeout"],
            forwarded.pop(),
        )
    )
    assert times in row("Request headers")
    idle = hcm["common_http_protocol_options"]["idle_timeout"]
    assert f"closed after {seconds(idle)}" in row("Idle client connection")
    h2 = hcm["http2_protocol_options"]
    assert (
        f"{h2['max_concurrent_streams']} streams per connection; windows "
        f"{h2['initial_stream_window_size'] // KiB} KiB per stream, "
        f"{h2['initial_connection_window_size'] // MiB} MiB per connection"
    ) in row("HTTP/2")
    (connections,) = [
        m["typed_config"]["max_active_downstream_connections"]
        for m in envoy()["overload_manager"]["resource_monitors"]
        if "max_active_downstream_connections" in m["typed_config"]
    ]
    assert f"{connections:,} at once" in row("Client connections")


def test_the_heap_budget_is_the_settings() -> None:
    heap = row("Envoy's heap")
    assert f"1/{settings.ENVOY_HEAP_SHARE} of the machine's" in heap
    assert f"at least {settings.ENVOY_HEAP_MIN_MB} MiB" in heap
    percents = []
    for action in envoy()["overload_manager"]["actions"]:
        trigger = action["triggers"][0]
        value = trigger.get("threshold", trigger.get("scaled", {})).get("value")
        value = value if value is not None else trigger["scaled"]["scaling_threshold"]
        percents.append(round(100 * value))
    for shed in envoy()["overload_manager"]["loadshed_points"]:
        percents.append(round(100 * shed["triggers"][0]["threshold"]["value"]))
    for percent in set(percents):
        assert f"{percent} %" in heap


def test_values_and_detalle_are_the_domains() -> None:
    fields = row("Every field")
    assert f"`fan` {MAX_FAN_TEXT} characters, `id_externo` {MAX_ID_EXTERNO}" in fields
    assert f"labels {MAX_LABEL}, codes {MAX_CODE_LENGTH}" in fields
    shown = row("An error's `detalle`")
    assert f"at most {detalle.MAX_DETALLE} characters" in shown
    assert f"at most {detalle.MAX_SHOWN} characters" in shown


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("HTTPS responses", f"max-age={settings.DEFAULT_HSTS_MAX_AGE}"),
        (
            "The admin token",
            f"at least {secret_strength.MIN_LENGTH} characters, an entropy estimate of at "
            f"least {secret_strength.MIN_BITS} bits",
        ),
    ],
)
def test_defaults_of_the_open_doors(label: str, expected: str) -> None:
    assert expected in row(label)


def test_plain_http_listens_on_loopback() -> None:
    listener = envoy()["static_resources"]["listeners"][0]
    address = listener["address"]["socket_address"]["address"]
    assert row("Plain HTTP listens on").split(" | ")[1].startswith(address)
