"""The gateway's limits on slow requests, HTTP/2 and Envoy's memory (issue 22 §3), as
gateway/envoy.yaml ships them and as rendering sets the heap budget; and every copy of
their values in prose (the error catalogue, the settings table, docs/security.md) tied to
envoy.yaml.

(Envoy accepting them: tests/integration/test_gateway_validate.py; the attacks against a
real Envoy: tests/e2e/test_gateway_limits.py.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.api import edge_limits
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway import shape as envoy_shape
from loyalty_grpc.runtime.gateway import side_listeners as envoy_side_listeners
from loyalty_grpc.runtime.gateway.config import (
    GatewaySpec,
)
from loyalty_grpc.runtime.settings import (
    ENVOY_HEAP_MIN_MB,
    ENVOY_HEAP_SHARE,
    MIB,
    VARIABLES,
    documented_default,
)
from tests.gateway_specs import ADMIN_SOCKET, GATEWAY, ROOT, gateway_copy, hcm, routes, spec

MiB = MIB
DOC = ROOT / "docs" / "security.md"
LUA = GATEWAY / "envelope.lua"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((GATEWAY / "envoy.yaml").read_text(encoding="utf-8"))
    return loaded


def seconds(duration: str) -> float:
    assert duration.endswith("s"), duration
    return float(duration[:-1])


def route_timeout(config: dict[str, Any]) -> float:
    (api,) = [r for r in routes(config) if r["match"].get("prefix") == "/api/v1/"]
    return seconds(api["route"]["timeout"])


def overload(config: dict[str, Any]) -> dict[str, Any]:
    manager: dict[str, Any] = config["overload_manager"]
    return manager


def monitor(config: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [m for m in overload(config)["resource_monitors"] if m["name"] == name]
    typed: dict[str, Any] = found["typed_config"]
    return typed


def heap_trigger(entry: dict[str, Any]) -> dict[str, Any]:
    (trigger,) = entry["triggers"]
    assert trigger["name"] == envoy_config.HEAP_MONITOR
    found: dict[str, Any] = trigger
    return found


def threshold(config: dict[str, Any], name: str) -> float:
    """The heap pressure from which an action or load shed point is on (a threshold
    trigger), or starts (a scaled one)."""
    entries = overload(config)["actions"] + overload(config).get("loadshed_points", [])
    (entry,) = [e for e in entries if e["name"] == name]
    trigger = heap_trigger(entry)
    if "threshold" in trigger:
        return float(trigger["threshold"]["value"])
    return float(trigger["scaled"]["scaling_threshold"])


ACTIONS = "envoy.overload_actions."
SHED = "envoy.load_shed_points."


# ---------------------------------------------------------------- request headers


def test_the_header_limit_is_the_one_the_413_names(config: dict[str, Any]) -> None:
    """envelope.lua's detalle for headers over Envoy's limit (edge_limits.TOO_LARGE_HEADERS)
    names the limit envoy.yaml sets, and every rendered HTTP listener takes it."""
    assert hcm(config)["max_request_headers_kb"] == edge_limits.MAX_REQUEST_HEADERS_KB
    assert f"{edge_limits.MAX_REQUEST_HEADERS_KB} KiB" in edge_limits.TOO_LARGE_HEADERS
    assert "max_request_headers_kb" in envoy_config.EDGE_LIMITS


# ---------------------------------------------------------------- slow and idle requests


def test_slow_stalled_and_idle_requests_have_deadlines(config: dict[str, Any]) -> None:
    manager = hcm(config)
    headers = seconds(manager["request_headers_timeout"])
    whole = seconds(manager["request_timeout"])
    idle = seconds(manager["stream_idle_timeout"])
    connection = seconds(manager["common_http_protocol_options"]["idle_timeout"])
    # Issue 22 §3: a whole-request deadline of about 30 s; the headers come first.
    assert 0 < headers < whole <= 30
    # A stream waiting for the server must end as the route's timeout (503 envelope),
    # never as the idle timeout; a stalled body ends before the whole-request deadline.
    assert route_timeout(config) < idle < whole
    # An idle connection does not live for Envoy's default hour.
    assert 0 < connection <= 300


def test_http2_streams_and_windows_are_small(config: dict[str, Any]) -> None:
    h2 = hcm(config)["http2_protocol_options"]
    assert h2["max_concurrent_streams"] <= 100
    # 65535 is the least HTTP/2 allows (and Envoy accepts).
    assert 65535 <= h2["initial_stream_window_size"] <= MiB
    assert h2["initial_stream_window_size"] <= h2["initial_connection_window_size"] <= MiB


def test_the_redirect_listener_takes_the_api_listeners_limits() -> None:
    rendered = envoy_config.render_config(
        http_port=8443,
        upstreams=("127.0.0.1:50051",),
        admin_socket=ADMIN_SOCKET,
        gateway_dir=GATEWAY,
        tls_secret_path=Path("/run/sds/tls.yaml"),
        redirect_port=8081,
        public_host="pos.example.com",
    )
    api, redirect = rendered["static_resources"]["listeners"]
    assert redirect["name"] == envoy_side_listeners.REDIRECT_LISTENER_NAME
    manager = redirect["filter_chains"][0]["filters"][0]["typed_config"]
    limits = envoy_config.edge_limits(hcm({"static_resources": {"listeners": [api]}}))
    assert set(limits) == set(envoy_config.EDGE_LIMITS)
    assert {key: manager[key] for key in envoy_config.EDGE_LIMITS} == limits


# ---------------------------------------------------------------- Envoy's memory


def test_the_overload_manager_sheds_load_as_the_heap_fills(config: dict[str, Any]) -> None:
    heap = monitor(config, envoy_config.HEAP_MONITOR)
    assert heap["max_heap_size_bytes"] == 1024 * MiB  # when envoy.yaml runs as it is
    # Streams are charged from 64 KiB: the resets never pick a tx or resolve call.
    assert overload(config)["buffer_factory_config"] == {
        "minimum_account_to_track_power_of_two": 16
    }
    (reset,) = [
        a for a in overload(config)["actions"] if a["name"] == f"{ACTIONS}reset_high_memory_stream"
    ]
    scaled = heap_trigger(reset)["scaled"]
    order = [
        threshold(config, f"{ACTIONS}shrink_heap"),
        threshold(config, f"{ACTIONS}reset_high_memory_stream"),
        threshold(config, f"{ACTIONS}stop_accepting_requests"),
        float(scaled["saturation_threshold"]),
        threshold(config, f"{SHED}tcp_listener_accept"),
    ]
    # Give memory back, then reset the biggest streams, then refuse requests, then
    # connections: each step before the next, all before the budget is spent.
    assert order == sorted(order)
    assert order[0] < order[2] < order[-1] < 1
    # The old monitor stays first (tests/e2e/test_gateway_reload.py edits it).
    assert overload(config)["resource_monitors"][0]["name"] == (
        "envoy.resource_monitors.global_downstream_max_connections"
    )
    assert seconds(overload(config)["refresh_interval"]) <= 1


def overload_mapper(config: dict[str, Any]) -> dict[str, Any]:
    mapper: dict[str, Any] = hcm(config)["local_reply_config"]["mappers"][0]
    return mapper


def test_a_request_refused_for_memory_gets_its_own_envelope(config: dict[str, Any]) -> None:
    """No filter runs for it (envelope.lua neither): the first local reply mapper writes a
    servicio_no_disponible envelope whose detalle names the gateway's memory."""
    mapper = overload_mapper(config)
    cel = mapper["filter"]["extension_filter"]
    assert cel["name"] == "envoy.access_loggers.extension_filters.cel"
    assert cel["typed_config"]["expression"] == "response.code_details == 'overload'"
    body = mapper["body_format_override"]
    assert body["content_type"] == "application/json"
    envelope = json.loads(body["text_format_source"]["inline_string"], object_pairs_hook=list)
    assert [key for key, _ in envelope] == ["ok", "error"]
    error = dict(dict(envelope)["error"])
    entrada = CATALOGO[CodigoError.SERVICIO_NO_DISPONIBLE]
    assert (error["codigo"], error["mensaje"]) == (entrada.codigo.value, entrada.mensaje)
    assert mapper["status_code"] == entrada.http
    assert "memoria" in error["detalle"]
    assert "%" not in body["text_format_source"]["inline_string"]  # no command operator


# ---------------------------------------------------------------- rendering the budget


def test_rendering_sets_the_heap_budget_and_nothing_else() -> None:
    plain = spec().render(admin_socket=ADMIN_SOCKET)
    budgeted = GatewaySpec(**{**spec().__dict__, "max_heap_bytes": 96 * MiB}).render(
        admin_socket=ADMIN_SOCKET
    )
    assert monitor(budgeted, envoy_config.HEAP_MONITOR)["max_heap_size_bytes"] == 96 * MiB
    monitor(budgeted, envoy_config.HEAP_MONITOR)["max_heap_size_bytes"] = monitor(
        plain, envoy_config.HEAP_MONITOR
    )["max_heap_size_bytes"]
    assert budgeted == plain


def test_a_budget_without_a_heap_monitor_is_refused(tmp_path: Path) -> None:
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    config["overload_manager"]["resource_monitors"] = [
        m
        for m in config["overload_manager"]["resource_monitors"]
        if m["name"] != envoy_config.HEAP_MONITOR
    ]
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config))
    spec(gateway).render(admin_socket=ADMIN_SOCKET)  # without a budget to set, as configured
    with pytest.raises(envoy_shape.EnvoyError, match="fixed_heap resource monitor"):
        GatewaySpec(**{**spec(gateway).__dict__, "max_heap_bytes": 96 * MiB}).render(
            admin_socket=ADMIN_SOCKET
        )


def test_the_spec_keeps_the_budget_for_a_reload() -> None:
    budgeted = GatewaySpec(**{**spec().__dict__, "max_heap_bytes": 96 * MiB})
    assert GatewaySpec.from_json(budgeted.to_json()) == budgeted
    # A gateway.json written before the budget existed: envoy.yaml's.
    older = json.loads(spec().to_json())
    del older["max_heap_bytes"]
    assert GatewaySpec.from_json(json.dumps(older)).max_heap_bytes is None


# ---------------------------------------------------------------- timeouts as envelopes


def lua_table_text(name: str) -> dict[str, str]:
    lua = LUA.read_text(encoding="utf-8")
    block = re.search(rf"local {name} = \{{\n(.*?)\n\}}", lua, re.DOTALL)
    assert block is not None, name
    return dict(re.findall(r'^\s*\[?"?(\w+)"?\]?\s*=\s*"([^"]*)"', block.group(1), re.MULTILINE))


def test_envoys_timeouts_are_tiempo_agotado_with_a_spanish_detalle() -> None:
    assert lua_table_text("BY_HTTP_STATUS")["408"] == CodigoError.TIEMPO_AGOTADO.value
    assert CATALOGO[CodigoError.TIEMPO_AGOTADO].http == 408
    detalle = lua_table_text("DETALLE_FIJO")[CodigoError.TIEMPO_AGOTADO.value]
    assert "a tiempo" in detalle
    assert not re.search(r"\d", detalle)  # no value to keep in step with envoy.yaml


# ---------------------------------------------------------------- the values in prose


def test_the_catalogue_names_envoys_timeouts(config: dict[str, Any]) -> None:
    manager = hcm(config)
    cuando = CATALOGO[CodigoError.TIEMPO_AGOTADO].cuando
    numbers = [float(n) for n in re.findall(r"(\d+) s\b", cuando)]
    assert numbers == [
        seconds(manager["request_headers_timeout"]),
        seconds(manager["request_timeout"]),
        seconds(manager["stream_idle_timeout"]),
    ]


def test_the_settings_table_names_the_thresholds(config: dict[str, Any]) -> None:
    (variable,) = [v for v in VARIABLES if v.name == "LOYALTY_ENVOY_HEAP_MB"]
    assert [int(n) for n in re.findall(r"(\d+) %", variable.meaning)] == [
        round(100 * threshold(config, f"{ACTIONS}reset_high_memory_stream")),
        round(100 * threshold(config, f"{ACTIONS}stop_accepting_requests")),
        round(100 * threshold(config, f"{SHED}tcp_listener_accept")),
    ]
    assert f"1/{ENVOY_HEAP_SHARE}" in documented_default(variable)
    assert f"at least {ENVOY_HEAP_MIN_MB}" in documented_default(variable)


def doc_section() -> str:
    """The security page's section on these limits (its "## 3." heading to the next)."""
    text = DOC.read_text()
    start = text.index("\n## 3. ")
    return text[start : text.index("\n## ", start + 1)]


def doc_table() -> dict[str, str]:
    rows = re.findall(r"^\| (`?[\w ]+`?(?: `\w+`)?) \| ([^|]+) \|", doc_section(), re.MULTILINE)
    return {name.strip(): value.strip() for name, value in rows if name != "limit"}


def test_the_security_doc_gives_envoy_yamls_values(config: dict[str, Any]) -> None:
    manager = hcm(config)
    h2 = manager["http2_protocol_options"]
    table = doc_table()

    def duration(text: str) -> str:
        return f"{seconds(text):g} s"

    def percent(name: str) -> str:
        return f"{round(100 * threshold(config, name))} %"

    (reset,) = [
        a for a in overload(config)["actions"] if a["name"] == f"{ACTIONS}reset_high_memory_stream"
    ]
    saturation = round(100 * heap_trigger(reset)["scaled"]["saturation_threshold"])
    expected = {
        "`request_headers_timeout`": duration(manager["request_headers_timeout"]),
        "`request_timeout`": duration(manager["request_timeout"]),
        "`stream_idle_timeout`": duration(manager["stream_idle_timeout"]),
        "route `timeout`": f"{route_timeout(config):g} s",
        "`idle_timeout`": duration(manager["common_http_protocol_options"]["idle_timeout"]),
        "`max_concurrent_streams`": str(h2["max_concurrent_streams"]),
        "`initial_stream_window_size`": f"{h2['initial_stream_window_size'] // 1024} KiB",
        "`initial_connection_window_size`": f"{h2['initial_connection_window_size'] // MiB} MiB",
        "`max_active_downstream_connections`": str(
            monitor(config, "envoy.resource_monitors.global_downstream_max_connections")[
                "max_active_downstream_connections"
            ]
        ),
        "`max_heap_size_bytes`": "`LOYALTY_ENVOY_HEAP_MB`",
        "`shrink_heap`": percent(f"{ACTIONS}shrink_heap"),
        "`reset_high_memory_stream`": f"{percent(f'{ACTIONS}reset_high_memory_stream')[:-2]} % "
        f"to {saturation} %",
        "`stop_accepting_requests`": percent(f"{ACTIONS}stop_accepting_requests"),
        "`tcp_listener_accept`": percent(f"{SHED}tcp_listener_accept"),
    }
    assert table == expected
    text = " ".join(DOC.read_text().split())
    refresh = seconds(overload(config)["refresh_interval"])
    assert f"every {refresh:g} s (`refresh_interval`)" in text
    tracked = (
        2 ** overload(config)["buffer_factory_config"]["minimum_account_to_track_power_of_two"]
    )
    assert f"(at least {tracked // 1024} KiB)" in text
    # The default budget, as runtime/settings.py computes it.
    assert text.count(f"1/{ENVOY_HEAP_SHARE} of the memory") == 2
    assert f"at least {ENVOY_HEAP_MIN_MB} MiB" in text
