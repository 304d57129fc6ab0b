"""Envoy accepts what the gateway runs (`envoy --mode validate`, a process): the committed
gateway/envoy.yaml, its renderings and xDS generations, with HTTPS, the redirect listener
and mutual TLS to the servers; and refuses a broken one with its own message. What the
files say, without Envoy: tests/unit/test_gateway_config.py and
tests/unit/test_gateway_tls.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from loyalty_grpc.runtime.gateway import checks as envoy_checks
from loyalty_grpc.runtime.gateway import config as envoy_config
from loyalty_grpc.runtime.gateway import shape as envoy_shape
from loyalty_grpc.runtime.gateway import tls as envoy_tls
from loyalty_grpc.runtime.gateway import xds as envoy_xds
from loyalty_grpc.runtime.gateway.config import (
    GatewaySpec,
)
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from loyalty_grpc.runtime.settings import GrpcTls
from tests.gateway_specs import (
    ADMIN_SOCKET,
    GATEWAY,
    ROOT,
    gateway_copy,
    routes,
    spec,
    tls_spec,
)

# ---------------------------------------------------------------- the gateway folder


def test_committed_config_validates_from_the_repo_root() -> None:
    envoy_config.validate(Path("gateway/envoy.yaml"), cwd=ROOT)


def test_rendered_config_validates(tmp_path: Path) -> None:
    path = envoy_config.write_config(
        tmp_path / "envoy.yaml",
        http_port=18080,
        upstreams=("server:50052",),
        admin_socket=tmp_path / "admin" / "envoy.sock",
        gateway_dir=GATEWAY,
        listen_host="127.0.0.1",
    )
    envoy_config.validate(path, cwd=tmp_path)  # absolute paths: any working directory works


def test_invalid_config_raises_with_envoys_message(tmp_path: Path) -> None:
    broken = tmp_path / "envoy.yaml"
    broken.write_text("static_resources: {clusters: [{name: x, type: NOPE}]}\n")
    with pytest.raises(envoy_shape.EnvoyError, match="NOPE"):
        envoy_config.validate(broken)


def test_every_upstream_server_is_an_endpoint_in_order(tmp_path: Path) -> None:
    upstreams = ("10.0.0.1:50051", "server:50052", "[::1]:50053")
    rendered = envoy_config.render_config(
        http_port=18080, upstreams=upstreams, admin_socket=ADMIN_SOCKET, gateway_dir=GATEWAY
    )
    (group,) = rendered["static_resources"]["clusters"][0]["load_assignment"]["endpoints"]
    addresses = [lb["endpoint"]["address"]["socket_address"] for lb in group["lb_endpoints"]]
    assert addresses == [
        {"address": "10.0.0.1", "port_value": 50051},
        {"address": "server", "port_value": 50052},
        {"address": "::1", "port_value": 50053},
    ]
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(rendered))
    envoy_config.validate(path)


def test_install_writes_what_envoy_runs(tmp_path: Path) -> None:
    work = envoy_xds.install(spec(), tmp_path / "work")
    generation = envoy_xds.render_generation(spec(), work)
    assert yaml.safe_load(work.bootstrap.read_text()) == generation.bootstrap
    assert yaml.safe_load(work.listeners.read_text()) == generation.listeners
    assert yaml.safe_load(work.clusters.read_text()) == generation.clusters
    assert yaml.safe_load(work.static.read_text()) == generation.static
    envoy_config.validate(work.static)
    assert work.load_spec() == spec()
    assert sorted(path.name for path in work.assets.iterdir()) == sorted(
        Path(holder[key]).name for holder, key in envoy_config.file_references(generation.static)
    )
    assert not [path for path in tmp_path.rglob(".*") if path.name != ".lock"]  # temp files


def test_install_refuses_an_invalid_config_and_writes_nothing_envoy_reads(tmp_path: Path) -> None:
    gateway = gateway_copy(tmp_path)
    config = envoy_config.load_config(gateway)
    routes(config)[0]["direct_response"]["status"] = 999
    (gateway / "envoy.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(envoy_shape.EnvoyError, match=r"must be inside range") as error:
        envoy_xds.install(spec(gateway), tmp_path / "work")
    # Envoy prints the whole listener before the reason: the middle is left out.
    assert "lines of the offending configuration" in str(error.value)
    assert len(str(error.value).splitlines()) < 12
    work = envoy_xds.WorkDir(tmp_path / "work")
    assert not work.bootstrap.exists()
    assert not work.listeners.exists()


def test_check_command_validates_a_gateway_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = gateway_copy(tmp_path)
    assert envoy_xds.check_command(gateway) == 0
    assert "OK" in capsys.readouterr().out
    (gateway / "envelope.lua").unlink()
    assert envoy_xds.check_command(gateway) == 1
    assert "envelope.lua does not exist" in capsys.readouterr().out


def test_check_command_checks_the_folder_the_running_gateway_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --gateway-dir, `check` looks at what `reload` would apply: the folder of the
    gateway started in the work dir; with no gateway there, the packaged folder."""
    gateway = gateway_copy(tmp_path)
    work = tmp_path / "work"
    envoy_xds.install(spec(gateway), work)
    assert envoy_xds.check_command(None, work) == 0
    assert f"{gateway / 'envoy.yaml'} as the gateway in {work} runs it" in capsys.readouterr().out
    (gateway / "envelope.lua").unlink()
    assert envoy_xds.check_command(None, work) == 1
    assert "envelope.lua does not exist" in capsys.readouterr().out
    assert envoy_xds.check_command(None, tmp_path / "no-gateway") == 0
    assert f"OK: {GATEWAY.resolve() / 'envoy.yaml'}\n" in capsys.readouterr().out


# ---------------------------------------------------------------- HTTPS and mutual TLS


def test_tls_rendering_validates_and_the_spec_keeps_it(pair: TlsFiles, tmp_path: Path) -> None:
    work = envoy_xds.install(tls_spec(pair), tmp_path / "work")
    assert yaml.safe_load(work.tls_secret.read_text()) == envoy_tls.tls_secret(pair)
    spec = work.load_spec()  # what `gateway reload` renders again
    assert spec.tls == pair
    assert GatewaySpec.from_json(tls_spec(None).to_json()).tls is None


def test_check_command_renders_tls(pair: TlsFiles, capsys: pytest.CaptureFixture[str]) -> None:
    assert envoy_xds.check_command(tls=pair) == 0
    assert "OK" in capsys.readouterr().out


def test_redirect_listener_forwards_nothing(pair: TlsFiles, tmp_path: Path) -> None:
    spec = dataclasses.replace(tls_spec(pair), redirect_port=8081, public_host="pos.example.com")
    generation = envoy_xds.render_generation(spec, envoy_xds.WorkDir(tmp_path))
    listeners = generation.static["static_resources"]["listeners"]
    assert [item["name"] for item in listeners] == ["pos_http", "pos_http_redirect"]
    redirect = listeners[1]
    assert redirect["address"]["socket_address"]["port_value"] == 8081
    assert "transport_socket" not in redirect["filter_chains"][0]
    text = json.dumps(redirect)
    assert "cluster" not in text  # no route forwards
    assert '"port_redirect": 8443' in text
    assert '"host_redirect": "pos.example.com"' in text
    envoy_checks.check_gateway_mark(generation.static)
    assert GatewaySpec.from_json(spec.to_json()) == spec
    assert envoy_xds.check_command(work_dir=envoy_xds.install(spec, tmp_path / "w").path) == 0


def test_mutual_tls_to_the_servers_by_sds_validates_and_the_spec_keeps_it(
    grpc_tls: GrpcTls, tmp_path: Path
) -> None:
    spec = tls_spec(None).with_upstream_tls(grpc_tls)
    work = envoy_xds.install(spec, tmp_path / "work")
    (cluster,) = yaml.safe_load(work.static.read_text())["static_resources"]["clusters"]
    socket = cluster["transport_socket"]
    assert socket == envoy_tls.upstream_tls_transport_socket(*work.upstream_sds)
    context = socket["typed_config"]["common_tls_context"]
    assert context["alpn_protocols"] == ["h2"]
    assert context["tls_params"] == {"tls_minimum_protocol_version": "TLSv1_2"}
    certificate_file, ca_file = work.upstream_sds
    (certificate,) = yaml.safe_load(certificate_file.read_text())["resources"]
    assert certificate["tls_certificate"]["certificate_chain"] == {"filename": str(grpc_tls.cert)}
    assert certificate["tls_certificate"]["watched_directory"] == {
        "path": str(grpc_tls.cert.parent)
    }
    (ca,) = yaml.safe_load(ca_file.read_text())["resources"]
    assert ca["validation_context"]["trusted_ca"] == {"filename": str(grpc_tls.ca)}
    loaded = work.load_spec()  # what `gateway reload` renders again
    assert loaded.upstream_tls == grpc_tls
    assert tls_spec(None).upstream_tls is None
    assert "transport_socket" not in str(envoy_config.load_config()["static_resources"]["clusters"])


# ---------------------------------------------------------------- Envoy's heap budget


def test_a_heap_budget_is_rendered_into_the_bootstrap_and_validates(tmp_path: Path) -> None:
    budget = 96 * 1024 * 1024
    work = envoy_xds.install(dataclasses.replace(spec(), max_heap_bytes=budget), tmp_path / "w")
    monitors = yaml.safe_load(work.bootstrap.read_text())["overload_manager"]["resource_monitors"]
    (heap,) = [m for m in monitors if m["name"] == envoy_config.HEAP_MONITOR]
    assert heap["typed_config"]["max_heap_size_bytes"] == budget
    assert work.load_spec().max_heap_bytes == budget  # a reload renders the same bootstrap
