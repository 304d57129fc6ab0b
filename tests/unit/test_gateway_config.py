"""gateway/envoy.yaml and gateway/envelope.lua: Envoy accepts them, the envelopes they
produce use the error catalogue exactly, and nothing routes to the back office.

(The same behaviour over real HTTP: tests/e2e/test_gateway_errors.py.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import descriptor_pb2

from loyalty_grpc.domain.errors import CATALOGO, Codigo
from loyalty_grpc.runtime import envoy

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
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


def hcm(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (network_filter,) = chain["filters"]
    assert network_filter["name"] == "envoy.filters.network.http_connection_manager"
    typed: dict[str, Any] = network_filter["typed_config"]
    return typed


def http_filter(config: dict[str, Any], name: str) -> dict[str, Any]:
    for item in hcm(config)["http_filters"]:
        if item["name"] == name:
            typed: dict[str, Any] = item["typed_config"]
            return typed
    raise AssertionError(f"no http filter {name}")


def routes(config: dict[str, Any]) -> list[dict[str, Any]]:
    (virtual_host,) = hcm(config)["route_config"]["virtual_hosts"]
    found: list[dict[str, Any]] = virtual_host["routes"]
    return found


# ---------------------------------------------------------------- Envoy accepts it


def test_committed_config_validates_from_the_repo_root() -> None:
    envoy.validate(Path("gateway/envoy.yaml"), cwd=ROOT)


def test_rendered_config_validates(tmp_path: Path) -> None:
    path = envoy.write_config(tmp_path / "envoy.yaml", http_port=18080,
                              upstream_host="server", upstream_port=50052, admin_port=0,
                              gateway_dir=GATEWAY, listen_host="127.0.0.1")
    envoy.validate(path, cwd=tmp_path)  # absolute paths: any working directory works


def test_invalid_config_raises_with_envoys_message(tmp_path: Path) -> None:
    broken = tmp_path / "envoy.yaml"
    broken.write_text("static_resources: {clusters: [{name: x, type: NOPE}]}\n")
    with pytest.raises(envoy.EnvoyError, match="NOPE"):
        envoy.validate(broken)


def test_render_changes_only_ports_addresses_and_paths() -> None:
    original = envoy.load_config(GATEWAY)
    rendered = envoy.render_config(http_port=18080, upstream_host="server", upstream_port=50052,
                                   admin_port=19901, gateway_dir=GATEWAY)
    assert rendered["admin"]["address"]["socket_address"] == {"address": "127.0.0.1",
                                                              "port_value": 19901}
    listen = rendered["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listen == {"address": "0.0.0.0", "port_value": 18080}
    endpoint = (rendered["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]
                ["lb_endpoints"][0]["endpoint"]["address"]["socket_address"])
    assert endpoint == {"address": "server", "port_value": 50052}
    lua_file = http_filter(rendered, "envoy.filters.http.lua")["default_source_code"]["filename"]
    descriptor = http_filter(rendered, "envoy.filters.http.grpc_json_transcoder")[
        "proto_descriptor"]
    assert Path(lua_file) == LUA.resolve()
    assert Path(descriptor) == (GATEWAY / "loyalty_pos.pb").resolve()

    # Put the defaults back: the rest is untouched.
    rendered["admin"]["address"]["socket_address"]["port_value"] = 9901
    listen["port_value"] = 8080
    endpoint.update(address="127.0.0.1", port_value=50051)
    http_filter(rendered, "envoy.filters.http.lua")["default_source_code"]["filename"] = \
        "gateway/envelope.lua"
    http_filter(rendered, "envoy.filters.http.grpc_json_transcoder")["proto_descriptor"] = \
        "gateway/loyalty_pos.pb"
    for route in routes(rendered):
        body = route.get("direct_response", {}).get("body", {})
        if "filename" in body:  # the OpenAPI document
            assert Path(body["filename"]) == (GATEWAY / "openapi.json").resolve()
            body["filename"] = "gateway/openapi.json"
    assert rendered == original


def test_committed_defaults_match_the_module(config: dict[str, Any]) -> None:
    assert config["admin"]["address"]["socket_address"] == {
        "address": "127.0.0.1", "port_value": envoy.DEFAULT_ADMIN_PORT}
    listen = config["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listen["port_value"] == envoy.DEFAULT_HTTP_PORT
    endpoint = (config["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]
                ["lb_endpoints"][0]["endpoint"]["address"]["socket_address"])
    assert endpoint == {"address": envoy.DEFAULT_UPSTREAM_HOST,
                        "port_value": envoy.DEFAULT_UPSTREAM_PORT}


def test_gateway_dir_is_found() -> None:
    assert (envoy.find_gateway_dir() / "envoy.yaml").is_file()


# ---------------------------------------------------------------- filters as designed


def test_filter_order_and_transcoder_options(config: dict[str, Any]) -> None:
    names = [item["name"] for item in hcm(config)["http_filters"]]
    assert names[0] == "envoy.filters.http.lua"  # sees every response last
    assert names[-1] == "envoy.filters.http.router"
    assert names.index("envoy.filters.http.buffer") < names.index(
        "envoy.filters.http.grpc_json_transcoder")
    transcoder = http_filter(config, "envoy.filters.http.grpc_json_transcoder")
    assert transcoder["services"] == ["loyalty.v1.PosService"]
    assert transcoder["print_options"] == {"preserve_proto_field_names": True,
                                           "always_print_primitive_fields": True}
    assert transcoder["match_incoming_request_route"] is True
    assert transcoder["ignore_unknown_query_parameters"] is True
    assert transcoder["request_validation_options"]["reject_unknown_method"] is True
    assert transcoder.get("convert_grpc_status", False) is False  # envelope.lua owns errors


def test_body_limit_fits_the_largest_request(config: dict[str, Any]) -> None:
    limit = http_filter(config, "envoy.filters.http.buffer")["max_request_bytes"]
    largest = len(json.dumps({"promo": "x" * 200, "codigos": ["A" * 64] * 5000}))
    assert largest < limit <= 4 * 1024 * 1024


def test_no_local_reply_config_competes_with_the_lua(config: dict[str, Any]) -> None:
    """envelope.lua builds every Envoy-originated envelope (see the comments in envoy.yaml);
    a local_reply_config would rewrite bodies before it sees them."""
    assert "local_reply_config" not in hcm(config)


# ---------------------------------------------------------------- catalogue consistency


def lua_catalogue(lua: str) -> dict[str, tuple[int, str]]:
    block = re.search(r"-- BEGIN CATALOGO\n(.*?)-- END CATALOGO", lua, re.DOTALL)
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
        entrada = CATALOGO[Codigo(codigo)]
        assert (http, mensaje) == (entrada.http, entrada.mensaje), codigo
        assert not entrada.interno


def test_every_codigo_envelope_lua_answers_is_in_its_catalogue(lua: str) -> None:
    entries = lua_catalogue(lua)
    used = {*lua_table(lua, "BY_HTTP_STATUS").values(), *lua_table(lua, "BY_GRPC_STATUS").values()}
    used |= set(re.findall(r'codigo = "(\w+)"', lua))
    used |= set(re.findall(r'envelope\("(\w+)"', lua))
    used |= set(re.findall(r'or "(\w+)"', lua))
    assert {"solicitud_invalida", "ruta_no_encontrada", "solicitud_muy_grande",
            "servicio_no_disponible", "error_interno"} <= used
    assert used <= set(entries), used - set(entries)


def test_status_mappings_keep_the_catalogue_status_where_they_can(lua: str) -> None:
    entries = lua_catalogue(lua)
    for status, codigo in lua_table(lua, "BY_HTTP_STATUS").items():
        # Envoy's status is replaced by the catalogue's: same class of error at least.
        assert int(status) // 100 == entries[codigo][0] // 100, status


def test_envoy_direct_responses_map_to_their_catalogue_status(config: dict[str, Any],
                                                              lua: str) -> None:
    entries = lua_catalogue(lua)
    by_status = lua_table(lua, "BY_HTTP_STATUS")
    for route in routes(config):
        if "direct_response" in route:
            direct = route["direct_response"]
            if route["match"] == {"path": "/api/v1/openapi.json"}:
                assert direct == {"status": 200, "body": {"filename": "gateway/openapi.json"}}
                continue
            assert "body" not in direct  # the body is envelope.lua's
            codigo = by_status[str(direct["status"])]
            assert entries[codigo][0] == direct["status"]


def test_lua_envelope_starts_with_ok_then_error(lua: str) -> None:
    template = re.search(r"local function envelope\(codigo, detalle\)\n(.*?)\nend", lua,
                         re.DOTALL)
    assert template is not None
    pieces = re.findall(r"'([^']*)'|\"([^\"]*)\"", template.group(1))
    literal = "".join(a or b for a, b in pieces)
    assert literal == '{"ok":false,"error":{"codigo":,"mensaje":,"detalle":}}'
    # With the pieces filled in as json_string would, it is the server's envelope.
    filled = ('{"ok":false,"error":{"codigo":"ruta_no_encontrada","mensaje":'
              + json.dumps(CATALOGO[Codigo.RUTA_NO_ENCONTRADA].mensaje) + ',"detalle":""}}')
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
        assert error["mensaje"] == CATALOGO[Codigo(error["codigo"])].mensaje


# ---------------------------------------------------------------- the back office stays out


def test_descriptor_set_holds_only_the_pos_service() -> None:
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(
        (GATEWAY / "loyalty_pos.pb").read_bytes())
    services = {f"{file.package}.{service.name}" for file in descriptors.file
                for service in file.service}
    assert services == {"loyalty.v1.PosService"}


def first_route(config: dict[str, Any], path: str, *, grpc: bool) -> dict[str, Any]:
    """The route Envoy picks (for the matchers this config may use)."""
    for route in routes(config):
        match = route["match"]
        assert set(match) <= {"prefix", "path", "grpc"}, f"unknown matcher in {match}"
        if "grpc" in match and not grpc:
            continue
        if "prefix" in match and path.startswith(match["prefix"]):
            return route
        if "path" in match and path == match["path"]:
            return route
    raise AssertionError(f"no route for {path}")


@pytest.mark.parametrize("grpc", [True, False])
@pytest.mark.parametrize("path", [BACKOFFICE_PATH, "/loyalty.v1.BackofficeService/ApplyFixture",
                                  "/loyalty.v1.PosService/Ping", "/api/v1/ping"])
def test_no_route_reaches_the_back_office(config: dict[str, Any], path: str,
                                          grpc: bool) -> None:
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
        assert route["match"] == {"prefix": "/api/v1/"}
        assert not {"prefix_rewrite", "regex_rewrite", "path_rewrite_policy",
                    "host_rewrite_literal"} & set(route["route"])
        # The transcoder then picks the gRPC method, from PosService only.
        assert route["route"]["cluster"] == "loyalty_grpc"
    clusters = config["static_resources"]["clusters"]
    assert [cluster["name"] for cluster in clusters] == ["loyalty_grpc"]


def test_admin_interface_is_local_only(config: dict[str, Any]) -> None:
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
