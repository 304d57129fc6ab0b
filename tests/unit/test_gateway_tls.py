"""HTTPS at the gateway: what rendering adds for TLS (the TLS context, ALPN, minimum
version, the SDS file and the folders Envoy watches), that a reload keeps it, and the
checks of LOYALTY_TLS_CERT / LOYALTY_TLS_KEY."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from loyalty_grpc.runtime import envoy_config, envoy_xds
from loyalty_grpc.runtime.cli import main
from loyalty_grpc.runtime.envoy_config import GatewaySpec, TlsFiles
from loyalty_grpc.runtime.settings import EXIT_CONFIG, ConfigError, GrpcTls, Settings
from tests.tls_certs import install_pair, make_ca, make_server_cert


@pytest.fixture
def pair(tmp_path: Path) -> TlsFiles:
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = TlsFiles(cert=certs / "server.pem", key=certs / "server.key")
    install_pair(make_server_cert(make_ca()), tls.cert, tls.key)
    return tls


def _spec(tls: TlsFiles | None) -> GatewaySpec:
    return GatewaySpec(
        http_port=8443,
        upstreams=("127.0.0.1:50051",),
        admin_port=0,
        gateway_dir=envoy_config.find_gateway_dir(),
        tls_cert=tls.cert if tls else None,
        tls_key=tls.key if tls else None,
    )


def _listener(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    assert listener["name"] == envoy_config.LISTENER_NAME
    found: dict[str, Any] = listener
    return found


def test_plain_http_by_default(tmp_path: Path) -> None:
    generation = envoy_xds.render_generation(_spec(None), envoy_xds.WorkDir(tmp_path))
    for chain in _listener(generation.static)["filter_chains"]:
        assert "transport_socket" not in chain
    assert generation.secret is None
    # and the committed envoy.yaml has no TLS of its own
    committed = envoy_config.load_config()
    assert "transport_socket" not in str(committed)


def test_tls_context_alpn_min_version_and_sds_from_a_file(pair: TlsFiles, tmp_path: Path) -> None:
    work = envoy_xds.WorkDir(tmp_path / "work")
    generation = envoy_xds.render_generation(_spec(pair), work)
    (chain,) = _listener(generation.static)["filter_chains"]
    socket = chain["transport_socket"]
    assert socket["name"] == "envoy.transport_sockets.tls"
    context = socket["typed_config"]
    assert context["@type"].endswith("tls.v3.DownstreamTlsContext")
    common = context["common_tls_context"]
    assert common["alpn_protocols"] == ["h2", "http/1.1"]
    assert common["tls_params"] == {"tls_minimum_protocol_version": "TLSv1_2"}
    assert "tls_certificates" not in common  # never inline: by SDS only
    (sds,) = common["tls_certificate_sds_secret_configs"]
    assert sds["name"] == envoy_config.TLS_SECRET_NAME
    source = sds["sds_config"]["path_config_source"]
    assert source == {
        "path": str(work.tls_secret),
        "watched_directory": {"path": str(work.tls_secret.parent)},
    }
    # The SDS file: a Secret naming the PEM files, their folder watched.
    assert generation.secret is not None
    (secret,) = generation.secret["resources"]
    assert secret["@type"].endswith("tls.v3.Secret")
    assert secret["name"] == envoy_config.TLS_SECRET_NAME
    assert secret["tls_certificate"] == {
        "certificate_chain": {"filename": str(pair.cert)},
        "private_key": {"filename": str(pair.key)},
        "watched_directory": {"path": str(pair.cert.parent)},
    }
    # The listeners' xDS file carries the same.
    (listener,) = generation.listeners["resources"]
    assert listener["filter_chains"][0]["transport_socket"] == socket


def test_files_in_two_folders_are_watched_each(tmp_path: Path) -> None:
    tls = TlsFiles(cert=tmp_path / "a" / "cert.pem", key=tmp_path / "b" / "key.pem")
    certificate = envoy_config.tls_secret(tls)["resources"][0]["tls_certificate"]
    assert "watched_directory" not in certificate


def test_tls_rendering_validates_and_the_spec_keeps_it(pair: TlsFiles, tmp_path: Path) -> None:
    work = envoy_xds.install(_spec(pair), tmp_path / "work")
    assert yaml.safe_load(work.tls_secret.read_text()) == envoy_config.tls_secret(pair)
    spec = work.load_spec()  # what `gateway reload` renders again
    assert spec.tls == pair
    assert GatewaySpec.from_json(_spec(None).to_json()).tls is None


def test_a_spec_written_before_tls_reads_as_plain_http_with_one_upstream() -> None:
    old = '{"http_port": 8080, "upstream_host": "h", "upstream_port": 1, "admin_port": 0, '
    old += '"gateway_dir": "/g", "listen_host": null}'
    spec = GatewaySpec.from_json(old)
    assert spec.tls is None
    assert spec.upstreams == ("h:1",)
    assert GatewaySpec.from_json(old.replace('"h"', '"[::1]"')).upstreams == ("[::1]:1",)
    assert GatewaySpec.from_json(spec.to_json()) == spec


def test_a_transport_socket_in_envoy_yaml_is_refused(pair: TlsFiles, tmp_path: Path) -> None:
    listener = _listener(envoy_config.load_config())
    listener["filter_chains"][0]["transport_socket"] = {"name": "x"}
    with pytest.raises(envoy_config.EnvoyError, match="already has a transport_socket"):
        envoy_config._add_tls(listener, tmp_path / "secret.yaml")


def test_check_command_renders_tls(pair: TlsFiles, capsys: pytest.CaptureFixture[str]) -> None:
    assert envoy_xds.check_command(tls=pair) == 0
    assert "OK" in capsys.readouterr().out


# ---------------------------------------------------------------- settings


def test_tls_unset_is_plain_http() -> None:
    assert Settings.from_env({}).tls_files() is None


def test_tls_both_files(pair: TlsFiles) -> None:
    settings = Settings.from_env(
        {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(pair.key)}, wallet=False
    )
    assert settings.tls_files() == (pair.cert.resolve(), pair.key.resolve())


def test_tls_flags_override_the_environment(pair: TlsFiles, tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"LOYALTY_TLS_CERT": str(tmp_path / "x"), "LOYALTY_TLS_KEY": str(tmp_path / "y")},
        wallet=False,
    ).with_flags(tls_cert=str(pair.cert), tls_key=str(pair.key))
    assert settings.tls_files() == (pair.cert.resolve(), pair.key.resolve())


@pytest.mark.parametrize("only", ["LOYALTY_TLS_CERT", "LOYALTY_TLS_KEY"])
def test_tls_both_or_neither(pair: TlsFiles, only: str) -> None:
    path = pair.cert if only == "LOYALTY_TLS_CERT" else pair.key
    settings = Settings.from_env({only: str(path)}, wallet=False)
    other = "LOYALTY_TLS_KEY" if only == "LOYALTY_TLS_CERT" else "LOYALTY_TLS_CERT"
    with pytest.raises(ConfigError, match=f"{other} must be set too"):
        settings.tls_files()


@pytest.mark.parametrize("missing", ["LOYALTY_TLS_CERT", "LOYALTY_TLS_KEY"])
def test_tls_missing_file_names_the_variable(pair: TlsFiles, tmp_path: Path, missing: str) -> None:
    env = {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(pair.key)}
    env[missing] = str(tmp_path / "absent.pem")
    with pytest.raises(ConfigError, match=f"^{missing}: cannot read .*absent.pem"):
        Settings.from_env(env, wallet=False).tls_files()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_tls_unreadable_key_names_the_variable(pair: TlsFiles) -> None:
    pair.key.chmod(0)
    env = {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(pair.key)}
    with pytest.raises(ConfigError, match=r"^LOYALTY_TLS_KEY: cannot read"):
        Settings.from_env(env, wallet=False).tls_files()


def test_tls_not_pem_and_mismatched_key(pair: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    env = {"LOYALTY_TLS_CERT": str(junk), "LOYALTY_TLS_KEY": str(pair.key)}
    with pytest.raises(ConfigError, match=r"^LOYALTY_TLS_CERT: .* is not a PEM file"):
        Settings.from_env(env, wallet=False).tls_files()
    other = make_server_cert(make_ca())
    other_key = tmp_path / "other.key"
    other_key.write_bytes(other.key_pem)
    env = {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(other_key)}
    with pytest.raises(ConfigError, match=r"^LOYALTY_TLS_KEY: .* is not the private key"):
        Settings.from_env(env, wallet=False).tls_files()


def test_gateway_run_refuses_half_a_tls_configuration(
    pair: TlsFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["gateway", "run", "--tls-cert", str(pair.cert), "--work-dir", str(tmp_path / "w")])
    assert code == EXIT_CONFIG
    assert "LOYALTY_TLS_KEY must be set too" in capsys.readouterr().err


def test_redirect_listener_forwards_nothing(pair: TlsFiles, tmp_path: Path) -> None:
    spec = dataclasses.replace(_spec(pair), redirect_port=8081)
    generation = envoy_xds.render_generation(spec, envoy_xds.WorkDir(tmp_path))
    listeners = generation.static["static_resources"]["listeners"]
    assert [item["name"] for item in listeners] == ["pos_http", "pos_http_redirect"]
    redirect = listeners[1]
    assert redirect["address"]["socket_address"]["port_value"] == 8081
    assert "transport_socket" not in redirect["filter_chains"][0]
    text = json.dumps(redirect)
    assert "cluster" not in text  # no route forwards
    assert '"port_redirect": 8443' in text
    envoy_config.check_gateway_mark(generation.static)
    assert GatewaySpec.from_json(spec.to_json()) == spec
    assert envoy_xds.check_command(work_dir=envoy_xds.install(spec, tmp_path / "w").path) == 0


def test_redirect_port_needs_tls(pair: TlsFiles) -> None:
    with pytest.raises(ConfigError, match="LOYALTY_HTTP_REDIRECT_PORT needs HTTPS"):
        Settings.from_env({"LOYALTY_HTTP_REDIRECT_PORT": "8081"}, wallet=False).tls_files()
    env = {
        "LOYALTY_TLS_CERT": str(pair.cert),
        "LOYALTY_TLS_KEY": str(pair.key),
        "LOYALTY_HTTP_REDIRECT_PORT": "8080",
    }
    with pytest.raises(ConfigError, match="must differ from LOYALTY_HTTP_PORT"):
        Settings.from_env(env, wallet=False).tls_files()
    with pytest.raises(envoy_config.EnvoyError, match="needs TLS"):
        dataclasses.replace(_spec(None), redirect_port=8081).render()


def test_tls_key_that_cannot_be_read_names_the_variable(pair: TlsFiles, tmp_path: Path) -> None:
    env = {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(tmp_path)}  # a folder
    with pytest.raises(ConfigError, match=r"^LOYALTY_TLS_KEY: cannot read .*: Is a directory"):
        Settings.from_env(env, wallet=False).tls_files()


# ---------------------------------------------------------------- mutual TLS to the servers


@pytest.fixture
def grpc_tls(tmp_path: Path) -> GrpcTls:
    folder = tmp_path / "grpc-tls"
    folder.mkdir()
    ca = make_ca("grpc CA")
    tls = GrpcTls(
        cert=folder / "envoy.pem", key=folder / "envoy.key", ca=ca.write(folder / "ca.pem")
    )
    install_pair(make_server_cert(ca, client=True), tls.cert, tls.key)
    return tls


def test_mutual_tls_to_the_servers_by_sds_validates_and_the_spec_keeps_it(
    grpc_tls: GrpcTls, tmp_path: Path
) -> None:
    spec = _spec(None).with_upstream_tls(grpc_tls)
    work = envoy_xds.install(spec, tmp_path / "work")
    (cluster,) = yaml.safe_load(work.static.read_text())["static_resources"]["clusters"]
    socket = cluster["transport_socket"]
    assert socket == envoy_config.upstream_tls_transport_socket(*work.upstream_sds)
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
    assert _spec(None).upstream_tls is None
    assert "transport_socket" not in str(envoy_config.load_config()["static_resources"]["clusters"])


def test_grpc_tls_settings_are_all_or_none_and_checked(grpc_tls: GrpcTls, tmp_path: Path) -> None:
    env = {
        "LOYALTY_GRPC_TLS_CERT": str(grpc_tls.cert),
        "LOYALTY_GRPC_TLS_KEY": str(grpc_tls.key),
        "LOYALTY_GRPC_TLS_CA": str(grpc_tls.ca),
    }
    assert Settings.from_env(env, wallet=False).grpc_tls() == grpc_tls
    assert Settings.from_env({}, wallet=False).grpc_tls() is None
    without_ca = {k: v for k, v in env.items() if k != "LOYALTY_GRPC_TLS_CA"}
    with pytest.raises(ConfigError) as missing:
        Settings.from_env(without_ca, wallet=False).grpc_tls()
    assert str(missing.value) == (
        "LOYALTY_GRPC_TLS_CA must be set too when LOYALTY_GRPC_TLS_CERT and "
        "LOYALTY_GRPC_TLS_KEY are (all or none)"
    )
    not_a_ca = tmp_path / "not-a-ca.pem"
    not_a_ca.write_text("-----BEGIN NOTHING-----\n")
    with pytest.raises(ConfigError, match=r"LOYALTY_GRPC_TLS_CA: .* holds no usable CA"):
        Settings.from_env(env | {"LOYALTY_GRPC_TLS_CA": str(not_a_ca)}, wallet=False).grpc_tls()
    other = make_server_cert(make_ca())
    wrong_key = tmp_path / "wrong.key"
    wrong_key.write_bytes(other.key_pem)
    with pytest.raises(ConfigError, match=r"LOYALTY_GRPC_TLS_KEY: .* is not the private key"):
        Settings.from_env(env | {"LOYALTY_GRPC_TLS_KEY": str(wrong_key)}, wallet=False).grpc_tls()
