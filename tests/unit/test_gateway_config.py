"""gateway/envoy.yaml and gateway/envelope.lua: the envelopes they produce use the error
catalogue exactly, nothing routes to the back office, and every forwarded request carries
the gateway mark of api/gateway_protocol.py; what Envoy runs (the file-based xDS split of
the same configuration) is exactly that configuration.

(Envoy accepts them, `envoy --mode validate`: tests/integration/test_gateway_validate.py;
the same behaviour over real HTTP: tests/e2e/test_gateway_errors.py; live reloads:
tests/e2e/test_gateway_reload.py.)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import descriptor_pb2

from loyalty_grpc.api.edge_limits import BINDINGS, FLOOR
from loyalty_grpc.api.gateway_protocol import GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.runtime.gateway import checks as envoy_checks
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway import shape as envoy_shape
from loyalty_grpc.runtime.gateway import side_listeners as envoy_side_listeners
from loyalty_grpc.runtime.gateway import xds as envoy_xds
from tests.gateway_specs import ADMIN_SOCKET, GATEWAY, gateway_copy, hcm, routes, spec

CONFIG = GATEWAY / "envoy.yaml"
LUA = GATEWAY / "envelope.lua"
BACKOFFICE_PATH = "/loyalty.v1.BackofficeService/ListPrograms"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def lua() -> str:
    return LUA.read_text(encoding="utf-8")


def http_filter(config: dict[str, Any], name: str) -> dict[str, Any]:
    for item in hcm(config)["http_filters"]:
        if item["name"] == name:
            typed: dict[str, Any] = item["typed_config"]
            return typed
    raise AssertionError(f"no http filter {name}")


def test_render_changes_only_ports_addresses_and_paths() -> None:
    original = envoy_config.load_config(GATEWAY)
    rendered = envoy_config.render_config(
        http_port=18080,
        upstreams=("server:50052",),
        admin_socket=ADMIN_SOCKET,
        gateway_dir=GATEWAY,
    )
    assert rendered["admin"]["address"] == {
        "pipe": {"path": str(ADMIN_SOCKET), "mode": 0o600},
    }
    listen = rendered["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listen == {"address": "127.0.0.1", "port_value": 18080}
    endpoint = rendered["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0][
        "lb_endpoints"
    ][0]["endpoint"]["address"]["socket_address"]
    assert endpoint == {"address": "server", "port_value": 50052}
    lua_file = http_filter(rendered, "envoy.filters.http.lua")["default_source_code"]["filename"]
    descriptor = http_filter(rendered, "envoy.filters.http.grpc_json_transcoder")[
        "proto_descriptor"
    ]
    assert Path(lua_file) == LUA.resolve()
    assert Path(descriptor) == (GATEWAY / "loyalty_pos.pb").resolve()

    # Put the defaults back: the rest is untouched.
    rendered["admin"]["address"]["pipe"]["path"] = "envoy-admin.sock"
    listen["port_value"] = 8080
    endpoint.update(address="127.0.0.1", port_value=50051)
    # Every file the listener reads (both Lua filters, the descriptor set, the OpenAPI
    # document) is the same file of the gateway folder, by absolute path.
    for (holder, key), (committed, _) in zip(
        envoy_config.file_references(rendered), envoy_config.file_references(original), strict=True
    ):
        assert Path(holder[key]) == (GATEWAY / Path(committed[key]).name).resolve()
        holder[key] = committed[key]
    assert rendered == original


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "pos.example.com"])
def test_plain_http_beyond_loopback_is_refused_unless_allowed(host: str, tmp_path: Path) -> None:
    """Whoever starts a gateway (up, gateway run, a test, a benchmark), plain HTTP beyond
    loopback must have been asked for by name; with TLS the address is free."""

    def render(**extra: Any) -> dict[str, Any]:
        return envoy_config.render_config(
            http_port=1, upstreams=("a:1",), admin_socket=ADMIN_SOCKET, gateway_dir=GATEWAY, **extra
        )

    with pytest.raises(envoy_shape.EnvoyError) as refused:
        render(listen_host=host)
    assert str(refused.value) == (
        f"LOYALTY_HTTP_HOST (--http-host) {host} is beyond loopback and the gateway has no "
        "TLS: API keys would cross the network in clear; set LOYALTY_TLS_CERT and "
        "LOYALTY_TLS_KEY, or LOYALTY_PLAIN_HTTP_BEYOND_LOOPBACK=1 "
        "(--plain-http-beyond-loopback) to accept that"
    )
    allowed = render(listen_host=host, plain_http_beyond_loopback=True)
    listen = allowed["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listen["address"] == host
    render(listen_host=host, tls_secret_path=tmp_path / "sds.yaml")
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "localhost", None):
        render(listen_host=loopback)


def test_committed_defaults_match_the_module(config: dict[str, Any]) -> None:
    # The admin interface is a Unix socket of mode 0600, never a TCP port.
    assert config["admin"]["address"] == {
        "pipe": {"path": "envoy-admin.sock", "mode": envoy_side_listeners.ADMIN_SOCKET_MODE}
    }
    assert envoy_side_listeners.ADMIN_SOCKET_MODE == 0o600
    listen = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listen["port_value"] == envoy_config.DEFAULT_HTTP_PORT
    endpoint = config["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0][
        "lb_endpoints"
    ][0]["endpoint"]["address"]["socket_address"]
    assert f"{endpoint['address']}:{endpoint['port_value']}" == envoy_config.DEFAULT_UPSTREAM


def test_gateway_dir_is_found() -> None:
    assert (envoy_config.find_gateway_dir() / "envoy.yaml").is_file()


def test_invalid_yaml_is_an_envoy_error(tmp_path: Path) -> None:
    (tmp_path / "envoy.yaml").write_text("static_resources: [\n")
    with pytest.raises(envoy_shape.EnvoyError, match="not valid YAML"):
        envoy_config.load_config(tmp_path)


def test_no_upstream_or_a_template_with_two_endpoints_is_refused(tmp_path: Path) -> None:
    with pytest.raises(envoy_shape.EnvoyError, match="at least one upstream"):
        envoy_config.render_config(
            http_port=1, upstreams=(), admin_socket=ADMIN_SOCKET, gateway_dir=GATEWAY
        )
    folder = Path(shutil.copytree(GATEWAY, tmp_path / "gateway"))
    config = envoy_config.load_config(folder)
    (group,) = config["static_resources"]["clusters"][0]["load_assignment"]["endpoints"]
    group["lb_endpoints"].append(group["lb_endpoints"][0])
    (folder / "envoy.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(envoy_shape.EnvoyError, match="must have one endpoint"):
        envoy_config.render_config(
            http_port=1, upstreams=("a:1",), admin_socket=ADMIN_SOCKET, gateway_dir=folder
        )


def test_servers_are_health_checked_and_retries_try_another_one(
    config: dict[str, Any],
) -> None:
    (cluster,) = config["static_resources"]["clusters"]
    (check,) = cluster["health_checks"]
    assert check["grpc_health_check"] == {"service_name": "loyalty.v1.PosService"}
    assert "no_traffic_interval" in check  # a dead server is noticed without traffic too
    outliers = cluster["outlier_detection"]
    # Only the network's and the process's failures eject a server, never its answers.
    assert outliers["split_external_local_origin_errors"] is True
    assert outliers["enforcing_consecutive_local_origin_failure"] == 100
    for name, value in outliers.items():
        if name.startswith("enforcing_") and name != "enforcing_consecutive_local_origin_failure":
            assert value == 0, name
    assert outliers["max_ejection_percent"] <= 50
    (api,) = [r for r in routes(config) if r["match"].get("prefix") == "/api/v1/"]
    policy = api["route"]["retry_policy"]
    assert [p["name"] for p in policy["retry_host_predicate"]] == [
        "envoy.retry_host_predicates.previous_hosts"
    ]


# ---------------------------------------------------------------- what Envoy runs (xDS)


def without_types(resources: list[dict[str, Any]], type_url: str) -> list[dict[str, Any]]:
    assert {resource["@type"] for resource in resources} == {type_url}
    return [{k: v for k, v in resource.items() if k != "@type"} for resource in resources]


def test_generation_is_the_static_config_split_for_xds(tmp_path: Path) -> None:
    work = envoy_xds.WorkDir(tmp_path / "work")
    generation = envoy_xds.render_generation(spec(), work)
    bootstrap = dict(generation.bootstrap)
    dynamic = bootstrap.pop("dynamic_resources")
    listeners = without_types(generation.listeners["resources"], envoy_xds.LISTENER_TYPE)
    clusters = without_types(generation.clusters["resources"], envoy_xds.CLUSTER_TYPE)
    assert {
        **bootstrap,
        "static_resources": {"listeners": listeners, "clusters": clusters},
    } == generation.static
    # Nothing else added.
    assert list(generation.static) == list(envoy_config.load_config(GATEWAY))
    for config_source, path in (("lds_config", work.listeners), ("cds_config", work.clusters)):
        assert dynamic[config_source] == {
            "path_config_source": {
                "path": str(path),
                "watched_directory": {"path": str(path.parent)},
            },
            "resource_api_version": "V3",
        }
    # Apart from the files it reads, the listener is render_config's; the admin socket is
    # the work dir's.
    rendered = spec().render(admin_socket=work.admin_socket)
    assert bootstrap["admin"]["address"]["pipe"] == {
        "path": str(tmp_path / "work" / "admin" / "envoy.sock"),
        "mode": 0o600,
    }
    for (pinned, key), (original, _) in zip(
        envoy_config.file_references(generation.static),
        envoy_config.file_references(rendered),
        strict=True,
    ):
        copied, source = Path(pinned[key]), Path(original[key])
        assert copied.parent == work.assets
        assert copied.read_bytes() == source.read_bytes()
        assert copied.name.startswith(source.stem + "-")
        assert copied.suffix == source.suffix
        pinned[key] = original[key]
    assert generation.static == rendered
    # The two Lua filters, the descriptor set, the OpenAPI document.
    assert len(envoy_config.file_references(rendered)) == 4


def test_a_changed_file_changes_the_listener_only(tmp_path: Path) -> None:
    gateway = gateway_copy(tmp_path)
    work = envoy_xds.WorkDir(tmp_path / "work")
    before = envoy_xds.render_generation(spec(gateway), work)
    assert envoy_xds.render_generation(spec(gateway), work) == before  # versions are content
    with (gateway / "openapi.json").open("a") as handle:
        handle.write("\n")
    after = envoy_xds.render_generation(spec(gateway), work)
    assert after.listeners["version_info"] != before.listeners["version_info"]
    assert after.clusters == before.clusters
    assert after.bootstrap == before.bootstrap
    assert len(list(work.assets.iterdir())) == 5  # both OpenAPI documents, until pruned


def test_bootstrap_level_dynamic_resources_are_refused(tmp_path: Path) -> None:
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    config["dynamic_resources"] = {}
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(envoy_shape.EnvoyError, match="dynamic_resources"):
        envoy_xds.render_generation(spec(gateway), envoy_xds.WorkDir(tmp_path / "work"))


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "xds" / "lds.yaml"
    envoy_xds.write_atomic(target, b"one")
    envoy_xds.write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [path.name for path in target.parent.iterdir()] == ["lds.yaml"]


def test_committed_config_names_a_node(config: dict[str, Any]) -> None:
    """File-based xDS needs a node id and cluster (Envoy refuses to start without)."""
    assert config["node"]["id"]
    assert config["node"]["cluster"]


# ---------------------------------------------------------------- filters as designed


def test_filter_order_and_transcoder_options(config: dict[str, Any]) -> None:
    names = [item["name"] for item in hcm(config)["http_filters"]]
    assert names[0] == "envoy.filters.http.lua"  # sees every response last
    assert names[-1] == "envoy.filters.http.router"
    assert names.index("envoy.filters.http.buffer") < names.index(
        "envoy.filters.http.grpc_json_transcoder"
    )
    # The strict request check: right after the buffer (the body is whole and bounded),
    # right before the transcoder.
    buffer_at = names.index("envoy.filters.http.buffer")
    check = hcm(config)["http_filters"][buffer_at + 1]
    assert check["name"] == "envoy.filters.http.lua"
    assert check["typed_config"]["default_source_code"] == {"filename": "gateway/request_check.lua"}
    assert names[buffer_at + 2] == "envoy.filters.http.grpc_json_transcoder"
    assert names.count("envoy.filters.http.lua") == 2
    transcoder = http_filter(config, "envoy.filters.http.grpc_json_transcoder")
    assert transcoder["services"] == ["loyalty.v1.PosService"]
    assert transcoder["print_options"] == {
        "preserve_proto_field_names": True,
        "always_print_primitive_fields": True,
    }
    assert transcoder["match_incoming_request_route"] is True
    assert transcoder["ignore_unknown_query_parameters"] is True
    assert transcoder["request_validation_options"]["reject_unknown_method"] is True
    assert transcoder.get("convert_grpc_status", False) is False  # envelope.lua owns errors


def binding_routes(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {route["name"]: route for route in routes(config) if route["name"] in BINDINGS}


def test_each_binding_has_its_body_limit(config: dict[str, Any]) -> None:
    """The buffer filter's limit of every binding route is api/edge_limits.py's; every
    other route gets the filter's default, FLOOR; the transcoder's own bound is the largest
    (and its response bound the listener's, not the request's route limit)."""
    bound = binding_routes(config)
    assert set(bound) == set(BINDINGS)
    for name, route in bound.items():
        per_route = route["typed_per_filter_config"]["envoy.filters.http.buffer"]
        assert per_route["buffer"] == {"max_request_bytes": BINDINGS[name].buffer_limit}, name
    assert http_filter(config, "envoy.filters.http.buffer")["max_request_bytes"] == FLOOR
    largest = max(binding.limit for binding in BINDINGS.values())
    assert largest == BINDINGS["POST /api/v1/codes"].limit
    largest_codes = len(json.dumps({"promo": "x" * 200, "codigos": ["A" * 64] * 5000}))
    assert largest_codes < largest <= 1024 * 1024
    transcoder = http_filter(config, "envoy.filters.http.grpc_json_transcoder")
    assert transcoder["max_request_body_size"] == largest
    listener = config["static_resources"]["listeners"][0]
    # A client's connection is read 64 KiB at a time (a refusal from the headers reads no
    # more of a large body); a transcoded response may be far larger (a roster page).
    assert listener["per_connection_buffer_limit_bytes"] == 65536
    assert transcoder["max_response_body_size"] == 8 * 1024 * 1024


def test_the_routes_envelope_lua_answers_are_routes(config: dict[str, Any], lua: str) -> None:
    """envelope.lua answers native gRPC and unknown /api/v1/ paths from the headers, knowing
    them by their route's name."""
    names = {route["name"] for route in routes(config)}
    for constant in ("NATIVE_GRPC_ROUTE", "UNKNOWN_API_ROUTE"):
        found = re.search(rf'^local {constant} = "(\w+)"$', lua, re.MULTILINE)
        assert found is not None, constant
        assert found.group(1) in names, constant
    (native,) = [r for r in routes(config) if r["name"] == "native_grpc"]
    assert native["match"] == {"prefix": "/", "grpc": {}}
    (unknown,) = [r for r in routes(config) if r["name"] == "api_v1"]
    assert unknown["match"] == {"prefix": "/api/v1/"}


def test_binding_routes_forward_like_the_api_route(config: dict[str, Any]) -> None:
    """Each binding route matches its method and its path (with or without one trailing
    slash), and forwards exactly as the hand-written /api/v1/ route; the bindings come
    before it, after the native-gRPC and OpenAPI routes."""
    names = [route["name"] for route in routes(config)]
    assert names[:2] == ["native_grpc", "openapi"]
    assert names[-2:] == ["api_v1", "not_found"]
    assert set(names[2:-2]) == set(BINDINGS)
    (api,) = [r for r in routes(config) if r["name"] == "api_v1"]
    for name, route in binding_routes(config).items():
        method, path = name.split(" ")
        assert route["match"] == {
            "safe_regex": {"regex": f"{path}/?"},
            "headers": [{"name": ":method", "string_match": {"exact": method}}],
        }
        assert route["route"] == api["route"], name


# ---------------------------------------------------------------- catalogue consistency


def lua_catalogue(lua: str) -> dict[str, tuple[int, str]]:
    block = re.search(r"-- BEGIN CATALOGO[^\n]*\n(.*?)-- END CATALOGO", lua, re.DOTALL)
    assert block is not None
    entries = dict[str, tuple[int, str]]()
    for line in block.group(1).splitlines():
        row = re.fullmatch(r'\s+(\w+) = \{(\d{3}), "([^"\\]*)"\},', line)
        if row is not None:
            entries[row.group(1)] = (int(row.group(2)), row.group(3))
        else:
            assert line.strip() in ("", "local CATALOGO = {", "}"), line
    return entries


def lua_table(lua: str, name: str) -> dict[str, str]:
    block = re.search(rf"local {name} = \{{\n(.*?)\n\}}", lua, re.DOTALL)
    assert block is not None, name
    return dict(re.findall(r'^\s*\[?"?(\w+)"?\]?\s*=\s*"(\w*)"', block.group(1), re.MULTILINE))


def test_lua_catalogue_is_the_domain_catalogue(lua: str) -> None:
    entries = lua_catalogue(lua)
    assert len(entries) >= 4
    for codigo, (http, mensaje) in entries.items():
        entrada = CATALOGO[CodigoError(codigo)]
        assert (http, mensaje) == (entrada.http, entrada.mensaje), codigo
        assert not entrada.interno


def test_every_codigo_envelope_lua_answers_is_in_its_catalogue(lua: str) -> None:
    entries = lua_catalogue(lua)
    used = {*lua_table(lua, "BY_HTTP_STATUS").values(), *lua_table(lua, "BY_GRPC_STATUS").values()}
    used |= set(re.findall(r'codigo = "(\w+)"', lua))
    used |= set(re.findall(r'envelope\("(\w+)"', lua))
    used |= set(re.findall(r'or "(\w+)"', lua))
    assert {
        "solicitud_invalida",
        "ruta_no_encontrada",
        "solicitud_muy_grande",
        "servicio_no_disponible",
        "error_interno",
    } <= used
    assert used <= set(entries), used - set(entries)


def test_status_mappings_keep_the_catalogue_status_where_they_can(lua: str) -> None:
    entries = lua_catalogue(lua)
    for status, codigo in lua_table(lua, "BY_HTTP_STATUS").items():
        # Envoy's status is replaced by the catalogue's: same class of error at least.
        assert int(status) // 100 == entries[codigo][0] // 100, status


def test_envoy_direct_responses_map_to_their_catalogue_status(
    config: dict[str, Any], lua: str
) -> None:
    entries = lua_catalogue(lua)
    by_status = lua_table(lua, "BY_HTTP_STATUS")
    for route in routes(config):
        if "direct_response" in route:
            direct = route["direct_response"]
            if route["match"].get("path") == "/api/v1/openapi.json":
                assert direct == {"status": 200, "body": {"filename": "gateway/openapi.json"}}
                continue
            assert "body" not in direct  # the body is envelope.lua's
            codigo = by_status[str(direct["status"])]
            assert entries[codigo][0] == direct["status"]


def test_lua_envelope_starts_with_ok_then_error(lua: str) -> None:
    template = re.search(r"local function envelope\(codigo, detalle\)\n(.*?)\nend", lua, re.DOTALL)
    assert template is not None
    pieces = re.findall(r"'([^']*)'|\"([^\"]*)\"", template.group(1))
    literal = "".join(a or b for a, b in pieces)
    assert literal == '{"ok":false,"error":{"codigo":,"mensaje":,"detalle":}}'
    # With the pieces filled in as json_string would, it is the server's envelope.
    filled = (
        '{"ok":false,"error":{"codigo":"ruta_no_encontrada","mensaje":'
        + json.dumps(CATALOGO[CodigoError.RUTA_NO_ENCONTRADA].mensaje)
        + ',"detalle":""}}'
    )
    assert list(json.loads(filled)) == ["ok", "error"]
    assert list(json.loads(filled)["error"]) == ["codigo", "mensaje", "detalle"]


def test_every_json_body_in_envoy_yaml_is_a_catalogue_envelope(config: dict[str, Any]) -> None:
    """Should a literal body ever be added (direct_response body, local reply format),
    it must be a catalogue envelope with `ok` first."""

    def strings(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [s for value in node.values() for s in strings(value)]
        if isinstance(node, list):
            return [s for value in node for s in strings(value)]
        return [node] if isinstance(node, str) else []

    for text in strings(config):
        if not text.lstrip().startswith("{"):
            continue
        body = json.loads(text, object_pairs_hook=list)
        assert [key for key, _ in body] == ["ok", "error"]
        error = dict(dict(body)["error"])
        assert error["mensaje"] == CATALOGO[CodigoError(error["codigo"])].mensaje


# ---------------------------------------------------------------- the back office stays out


def test_descriptor_set_holds_only_the_pos_service() -> None:
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(
        (GATEWAY / "loyalty_pos.pb").read_bytes()
    )
    services = {
        f"{file.package}.{service.name}" for file in descriptors.file for service in file.service
    }
    assert services == {"loyalty.v1.PosService"}


def first_route(
    config: dict[str, Any], path: str, *, grpc: bool, method: str = "POST"
) -> dict[str, Any]:
    """The route Envoy picks (for the matchers this config may use)."""
    for route in routes(config):
        match = route["match"]
        assert set(match) <= {"prefix", "path", "grpc", "safe_regex", "headers"}, match
        if "grpc" in match and not grpc:
            continue
        headers = {h["name"]: h["string_match"]["exact"] for h in match.get("headers", [])}
        assert set(headers) <= {":method"}, match
        if headers.get(":method", method) != method:
            continue
        if "prefix" in match and path.startswith(match["prefix"]):
            return route
        if "path" in match and path == match["path"]:
            return route
        if "safe_regex" in match and re.fullmatch(match["safe_regex"]["regex"], path):
            return route
    raise AssertionError(f"no route for {path}")


@pytest.mark.parametrize("grpc", [True, False])
@pytest.mark.parametrize(
    "path",
    [
        BACKOFFICE_PATH,
        "/loyalty.v1.BackofficeService/ApplyFixture",
        "/loyalty.v1.PosService/Ping",
        "/api/v1/ping",
    ],
)
def test_no_route_reaches_the_back_office(config: dict[str, Any], path: str, grpc: bool) -> None:
    route = first_route(config, path, grpc=grpc)
    if grpc or not path.startswith("/api/v1/"):
        assert "direct_response" in route
    else:
        assert route["route"]["cluster"] == "loyalty_grpc"


def test_routes_to_the_server_cannot_be_steered(config: dict[str, Any]) -> None:
    manager = hcm(config)
    assert manager["normalize_path"] is True  # /api/v1/../ is resolved before routing
    assert manager["merge_slashes"] is True
    assert manager["path_with_escaped_slashes_action"] == "REJECT_REQUEST"
    forwarding = [route for route in routes(config) if "route" in route]
    assert forwarding
    for route in forwarding:
        match = route["match"]
        assert match == {"prefix": "/api/v1/"} or (
            route["name"] in BINDINGS
            and match["safe_regex"]["regex"].startswith("/api/v1/")
            and re.fullmatch(r"[a-z0-9/]+/\?", match["safe_regex"]["regex"])
        ), match
        assert not {
            "prefix_rewrite",
            "regex_rewrite",
            "path_rewrite_policy",
            "host_rewrite_literal",
        } & set(route["route"])
        # The transcoder then picks the gRPC method, from PosService only.
        assert route["route"]["cluster"] == "loyalty_grpc"
    clusters = config["static_resources"]["clusters"]
    assert [cluster["name"] for cluster in clusters] == ["loyalty_grpc"]


# ---------------------------------------------------------------- the gateway mark


def test_the_route_table_sets_the_gateway_mark_of_the_server(config: dict[str, Any]) -> None:
    """api/gateway_protocol.py's name and value, overwriting a client's: the whole route
    table's request_headers_to_add (nothing below it may say otherwise)."""
    table = hcm(config)["route_config"]
    assert table["request_headers_to_add"] == [
        {
            "header": {"key": GATEWAY_MARK_KEY, "value": GATEWAY_MARK_VALUE},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        },
        envoy_checks.client_address_header(),  # tests/unit/test_client_address_config.py
    ]
    assert not table.get("most_specific_header_mutations_wins")
    envoy_checks.check_gateway_mark(config)
    forwarding = [route for route in routes(config) if "route" in route]
    assert forwarding  # every one of them is under the table's mark
    mentions = json.dumps(table["virtual_hosts"]).lower()
    assert GATEWAY_MARK_KEY not in mentions


def test_every_rendering_and_xds_generation_carries_the_mark(tmp_path: Path) -> None:
    generation = envoy_xds.render_generation(spec(), envoy_xds.WorkDir(tmp_path / "work"))
    for static in (spec().render(admin_socket=ADMIN_SOCKET), generation.static):
        envoy_checks.check_gateway_mark(static)
    (listener,) = without_types(generation.listeners["resources"], envoy_xds.LISTENER_TYPE)
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["route_config"]["request_headers_to_add"] == [
        envoy_checks.gateway_mark(),
        envoy_checks.client_address_header(),
    ]


@pytest.mark.parametrize(
    "change",
    [
        "no mark",
        "another value",
        "appended",
        "another name",
        "twice",
        "routes win",
        "route discovery",
    ],
)
def test_a_config_without_the_mark_is_refused(tmp_path: Path, change: str) -> None:
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    table = hcm(config)["route_config"]
    (mark,) = [e for e in table["request_headers_to_add"] if e == envoy_checks.gateway_mark()]
    if change == "no mark":
        del table["request_headers_to_add"]
    elif change == "another value":
        mark["header"]["value"] = "2"
    elif change == "appended":
        mark["append_action"] = "APPEND_IF_EXISTS_OR_ADD"
    elif change == "another name":
        mark["header"]["key"] = "x-loyalty-gateway-mark"
    elif change == "twice":
        table["request_headers_to_add"] = [mark, {**mark, "append_action": "ADD_IF_ABSENT"}]
    elif change == "routes win":
        table["most_specific_header_mutations_wins"] = True
    else:
        manager = hcm(config)
        del manager["route_config"]
        manager["rds"] = {"route_config_name": "pos_routes"}
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(envoy_shape.EnvoyError, match="gateway mark"):
        spec(gateway).render(admin_socket=ADMIN_SOCKET)
    with pytest.raises(envoy_shape.EnvoyError, match="gateway mark"):
        envoy_xds.install(spec(gateway), tmp_path / "work")
    assert not envoy_xds.WorkDir(tmp_path / "work").listeners.exists()


def test_the_admin_interface_is_a_unix_socket_of_mode_0600(config: dict[str, Any]) -> None:
    """Never a TCP port (no authentication, and POST /quitquitquit stops Envoy): a socket
    of the work dir that only Envoy's user (and root) may open."""
    assert set(config["admin"]["address"]) == {"pipe"}
    rendered = spec().render(admin_socket=ADMIN_SOCKET)
    assert rendered["admin"] == {"address": {"pipe": {"path": str(ADMIN_SOCKET), "mode": 0o600}}}
    assert "socket_address" not in json.dumps(rendered["admin"])


def test_an_admin_socket_path_too_long_for_the_kernel_is_refused(tmp_path: Path) -> None:
    deep = Path("/") / ("d" * 90) / "admin" / "envoy.sock"
    with pytest.raises(envoy_shape.EnvoyError, match=r"over the kernel's 107: use a shorter"):
        spec().render(admin_socket=deep)
    with pytest.raises(envoy_shape.EnvoyError, match="absolute path"):
        spec().render(admin_socket=Path("admin/envoy.sock"))


def test_no_metrics_listener_unless_asked(config: dict[str, Any]) -> None:
    rendered = spec().render(admin_socket=ADMIN_SOCKET)
    names = [listener["name"] for listener in rendered["static_resources"]["listeners"]]
    assert names == [envoy_shape.LISTENER_NAME]
    clusters = [cluster["name"] for cluster in rendered["static_resources"]["clusters"]]
    assert clusters == [envoy_shape.CLUSTER_NAME]


def test_the_metrics_listener_forwards_only_get_prometheus_and_ready() -> None:
    """/stats/prometheus to the supervisor's series server (Envoy's series and the
    gateway's own: runtime/gateway/series.py), /ready to the admin socket, both Unix
    sockets of mode 0600 in the admin folder; the series server behind a circuit breaker."""
    metrics_spec = dataclasses.replace(spec(), metrics_port=19901)
    rendered = metrics_spec.render(admin_socket=ADMIN_SOCKET)
    listeners = {item["name"]: item for item in rendered["static_resources"]["listeners"]}
    listener = listeners[envoy_side_listeners.METRICS_LISTENER_NAME]
    assert listener["address"] == {"socket_address": {"address": "127.0.0.1", "port_value": 19901}}
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["normalize_path"]
    assert manager["merge_slashes"]
    assert manager["path_with_escaped_slashes_action"] == "REJECT_REQUEST"
    (host,) = manager["route_config"]["virtual_hosts"]
    *forwarding, rest = host["routes"]
    get = [{"name": ":method", "string_match": {"exact": "GET"}}]
    assert [
        (r["match"]["path"], r["match"]["headers"], r["route"]["cluster"]) for r in forwarding
    ] == [("/stats/prometheus", get, "gateway_series"), ("/ready", get, "envoy_admin")]
    assert rest == {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
    clusters = {item["name"]: item for item in rendered["static_resources"]["clusters"]}

    def pipe(cluster: str) -> object:
        endpoint = clusters[cluster]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
        return endpoint["endpoint"]["address"]

    assert pipe("envoy_admin") == {"pipe": {"path": str(ADMIN_SOCKET), "mode": 0o600}}
    series_socket = ADMIN_SOCKET.parent / "stats.sock"
    assert pipe("gateway_series") == {"pipe": {"path": str(series_socket), "mode": 0o600}}
    assert envoy_xds.WorkDir(ADMIN_SOCKET.parent.parent).series_socket == series_socket
    # Not longer than the admin socket's: it fits wherever that one does.
    assert len(series_socket.name) <= len(ADMIN_SOCKET.name)
    (limits,) = clusters["gateway_series"]["circuit_breakers"]["thresholds"]
    maximum = envoy_side_listeners.SERIES_MAX_REQUESTS
    assert limits == {
        "max_connections": maximum,
        "max_pending_requests": maximum,
        "max_requests": maximum,
        "max_retries": 0,
    }
    envoy_checks.check_gateway_mark(rendered)
    elsewhere = dataclasses.replace(metrics_spec, metrics_host="0.0.0.0")
    address = elsewhere.render(admin_socket=ADMIN_SOCKET)["static_resources"]["listeners"][1]
    assert address["address"]["socket_address"]["address"] == "0.0.0.0"


def test_the_backstop_for_replies_that_skip_envelope_lua_is_the_catalogue_envelope(
    config: dict[str, Any], lua: str
) -> None:
    """The local reply mapper (envoy.yaml) writes what envelope.lua would for a 502-504,
    and nothing else: it rewrites bodies before envelope.lua sees them, and envelope.lua
    shows Envoy's reason (the body) as `detalle` for other statuses."""
    # The last mapper (the first is the overload manager's: tests/unit/test_gateway_limits.py).
    _overload, mapper = hcm(config)["local_reply_config"]["mappers"]
    override = mapper["body_format_override"]
    assert override["content_type"] == "application/json"
    body = override["text_format_source"]["inline_string"]
    parsed = json.loads(body)
    assert list(parsed) == ["ok", "error"]
    assert parsed["ok"] is False
    codigo = parsed["error"]["codigo"]
    assert codigo == lua_table(lua, "BY_HTTP_STATUS")["503"] == "servicio_no_disponible"
    entry = CATALOGO[CodigoError(codigo)]
    assert mapper["status_code"] == entry.http
    assert parsed["error"]["mensaje"] == entry.mensaje
    assert parsed["error"]["detalle"] == lua_table_text(lua, "DETALLE_FIJO")[codigo]
    assert "%" not in body  # no command operator: the text is sent as it is
    filters = mapper["filter"]["and_filter"]["filters"]
    bounds = [f["status_code_filter"]["comparison"] for f in filters]
    assert [(b["op"], b["value"]["default_value"]) for b in bounds] == [("GE", 502), ("LE", 504)]


def lua_table_text(lua: str, name: str) -> dict[str, str]:
    block = re.search(rf"local {name} = \{{\n(.*?)\n\}}", lua, re.DOTALL)
    assert block is not None, name
    return dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', block.group(1), re.MULTILINE))


# ---------------------------------------------------------------- the edge's routes


def test_the_edge_knows_every_forwarding_route(lua: str) -> None:
    assert envoy_checks.edge_bindings(lua) == set(BINDINGS)


@pytest.mark.parametrize("change", ["unnamed", "unknown name", "binding missing in the Lua"])
def test_a_forwarding_route_the_edge_does_not_know_is_refused(tmp_path: Path, change: str) -> None:
    """A route that forwards without the edge knowing it would reach the server without the
    key check and the body limit: refused by every rendering (`up`, `gateway run`/`reload`)."""
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    table = routes(config)
    (ping,) = [r for r in table if r["name"] == "GET /api/v1/ping"]
    if change == "binding missing in the Lua":
        lua = (gateway / "envelope.lua").read_text(encoding="utf-8")
        line = next(x for x in lua.splitlines() if x.startswith('  ["GET /api/v1/ping"] = {'))
        (gateway / "envelope.lua").write_text(lua.replace(line + "\n", ""), encoding="utf-8")
    else:
        extra = {**ping, "match": {"path": "/api/v1/ping/otro"}}
        if change == "unnamed":
            del extra["name"]
        else:
            extra["name"] = "GET /api/v1/ping/otro"
        table.insert(2, extra)
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(envoy_shape.EnvoyError, match="forwards to the server"):
        spec(gateway).render(admin_socket=ADMIN_SOCKET)


def _operator_route(cluster: str | dict[str, Any], *, filters_off: bool) -> dict[str, Any]:
    action: dict[str, Any] = (
        {"cluster": cluster} if isinstance(cluster, str) else {"weighted_clusters": cluster}
    )
    route: dict[str, Any] = {"name": "ops", "match": {"prefix": "/ops/"}, "route": action}
    if filters_off:
        route["typed_per_filter_config"] = {
            "envoy.filters.http.lua": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute",
                "disabled": True,
            },
            "envoy.filters.http.grpc_json_transcoder": {
                "@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig",
                "disabled": True,
            },
        }
    return route


@pytest.mark.parametrize(
    ("route", "refusal"),
    [
        (_operator_route("ops", filters_off=True), None),
        (_operator_route("ops", filters_off=False), "forwards to cluster 'ops' with the API's"),
        # To the API's cluster, filters off or not: only the edge's bindings may.
        (_operator_route("loyalty_grpc", filters_off=True), "forwards to the server"),
        (
            _operator_route(
                {"clusters": [{"name": "ops", "weight": 1}, {"name": "loyalty_grpc", "weight": 1}]},
                filters_off=True,
            ),
            "forwards to the server",
        ),
    ],
    ids=["own cluster, filters off", "filters on", "the API's cluster", "weighted, with the API's"],
)
def test_an_operator_route_turns_the_api_filters_off_and_avoids_the_server(
    tmp_path: Path, route: dict[str, Any], refusal: str | None
) -> None:
    """docs/gateway.md "Routes of your own", as every rendering checks it."""
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    table = routes(config)
    table.insert(len(table) - 1, route)  # before not_found
    cluster = copy.deepcopy(config["static_resources"]["clusters"][0])
    cluster["name"] = "ops"
    cluster["load_assignment"]["cluster_name"] = "ops"
    config["static_resources"]["clusters"].append(cluster)
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if refusal is None:
        spec(gateway).render(admin_socket=ADMIN_SOCKET)
    else:
        with pytest.raises(envoy_shape.EnvoyError, match=re.escape(refusal)):
            spec(gateway).render(admin_socket=ADMIN_SOCKET)
