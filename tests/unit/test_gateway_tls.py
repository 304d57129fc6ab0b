"""HTTPS at the gateway: what rendering adds for TLS (the TLS context, ALPN, minimum
version, the SDS file and the folders Envoy watches), that a reload keeps it, and the
checks of LOYALTY_TLS_CERT / LOYALTY_TLS_KEY. Envoy accepting the renderings:
tests/integration/test_gateway_validate.py."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from loyalty_grpc.runtime.cli import main
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
from loyalty_grpc.runtime.settings import EXIT_CONFIG, ConfigError, GrpcTls, Settings
from tests.gateway_specs import ADMIN_SOCKET, hcm, tls_spec
from tests.tls_certs import make_ca, make_server_cert


def _listener(config: dict[str, Any]) -> dict[str, Any]:
    (listener,) = config["static_resources"]["listeners"]
    assert listener["name"] == envoy_shape.LISTENER_NAME
    found: dict[str, Any] = listener
    return found


def test_plain_http_by_default(tmp_path: Path) -> None:
    generation = envoy_xds.render_generation(tls_spec(None), envoy_xds.WorkDir(tmp_path))
    for chain in _listener(generation.static)["filter_chains"]:
        assert "transport_socket" not in chain
    assert generation.secret is None
    # and the committed envoy.yaml has no TLS of its own
    committed = envoy_config.load_config()
    assert "transport_socket" not in str(committed)


def test_tls_context_alpn_min_version_and_sds_from_a_file(pair: TlsFiles, tmp_path: Path) -> None:
    work = envoy_xds.WorkDir(tmp_path / "work")
    generation = envoy_xds.render_generation(tls_spec(pair), work)
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
    assert sds["name"] == envoy_tls.TLS_SECRET_NAME
    source = sds["sds_config"]["path_config_source"]
    assert source == {
        "path": str(work.tls_secret),
        "watched_directory": {"path": str(work.tls_secret.parent)},
    }
    # The SDS file: a Secret naming the PEM files, their folder watched.
    assert generation.secret is not None
    (secret,) = generation.secret["resources"]
    assert secret["@type"].endswith("tls.v3.Secret")
    assert secret["name"] == envoy_tls.TLS_SECRET_NAME
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
    certificate = envoy_tls.tls_secret(tls)["resources"][0]["tls_certificate"]
    assert "watched_directory" not in certificate


def test_a_spec_written_before_tls_reads_as_plain_http_with_one_upstream() -> None:
    """Also before the admin socket: its `admin_port` is dropped (the admin interface is
    the work dir's socket), and no metrics listener is rendered."""
    old = '{"http_port": 8080, "upstream_host": "h", "upstream_port": 1, "admin_port": 0, '
    old += '"gateway_dir": "/g", "listen_host": null}'
    spec = GatewaySpec.from_json(old)
    assert spec.tls is None
    assert spec.metrics_port is None
    assert not spec.plain_http_beyond_loopback
    assert "admin_port" not in spec.to_json()
    assert spec.upstreams == ("h:1",)
    assert GatewaySpec.from_json(old.replace('"h"', '"[::1]"')).upstreams == ("[::1]:1",)
    assert GatewaySpec.from_json(spec.to_json()) == spec


def test_a_transport_socket_in_envoy_yaml_is_refused(pair: TlsFiles, tmp_path: Path) -> None:
    listener = _listener(envoy_config.load_config())
    listener["filter_chains"][0]["transport_socket"] = {"name": "x"}
    with pytest.raises(envoy_shape.EnvoyError, match="already has a transport_socket"):
        envoy_tls.add_tls(listener, tmp_path / "secret.yaml")


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
    with pytest.raises(envoy_shape.EnvoyError, match="needs TLS"):
        dataclasses.replace(tls_spec(None), redirect_port=8081).render(admin_socket=ADMIN_SOCKET)


def test_the_redirect_port_needs_the_public_host(pair: TlsFiles, tmp_path: Path) -> None:
    """Without it, no redirect port: the request's Host must never make the Location,
    and a certificate may hold several names or a wildcard, so none is guessed."""
    env = {
        "LOYALTY_TLS_CERT": str(pair.cert),
        "LOYALTY_TLS_KEY": str(pair.key),
        "LOYALTY_HTTP_REDIRECT_PORT": "8081",
    }
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env, wallet=False).tls_files()
    assert str(refused.value) == (
        "LOYALTY_HTTP_REDIRECT_PORT needs LOYALTY_PUBLIC_HOST (--public-host): the host name "
        "of the certificate, where the redirect sends clients (never the request's Host "
        "header, which the client chooses)"
    )
    given = Settings.from_env(env | {"LOYALTY_PUBLIC_HOST": "pos.example.com"}, wallet=False)
    assert given.tls_files() == (pair.cert, pair.key)
    assert given.with_flags(public_host="pos.example.com:443").public_host == (
        "pos.example.com:443"
    )
    spec = dataclasses.replace(tls_spec(pair), redirect_port=8081)
    with pytest.raises(envoy_shape.EnvoyError, match="needs the public host name"):
        spec.render(admin_socket=ADMIN_SOCKET, tls_secret_path=tmp_path / "sds.yaml")


@pytest.mark.parametrize(
    ("public_host", "host", "port"),
    [
        ("pos.example.com", "pos.example.com", 8443),
        ("pos.example.com:443", "pos.example.com", None),  # https's own port: not written
        ("10.0.0.5:9443", "10.0.0.5", 9443),
        ("[2001:db8::1]", "[2001:db8::1]", 8443),
    ],
)
def test_the_redirect_goes_to_the_public_host(
    pair: TlsFiles, tmp_path: Path, public_host: str, host: str, port: int | None
) -> None:
    spec = dataclasses.replace(tls_spec(pair), redirect_port=8081, public_host=public_host)
    rendered = spec.render(admin_socket=ADMIN_SOCKET, tls_secret_path=tmp_path / "sds.yaml")
    redirect = rendered["static_resources"]["listeners"][1]
    assert redirect["address"]["socket_address"]["port_value"] == 8081
    manager = redirect["filter_chains"][0]["filters"][0]["typed_config"]
    (virtual_host,) = manager["route_config"]["virtual_hosts"]
    redirects = [route["redirect"] for route in virtual_host["routes"] if "redirect" in route]
    assert redirects == 2 * [
        {
            "https_redirect": True,
            "host_redirect": host,
            **({"port_redirect": port} if port else {}),
            "response_code": "MOVED_PERMANENTLY",
        }
    ]
    # No HSTS on plain HTTP (a browser ignores it there anyway).
    assert "strict-transport-security" not in json.dumps(redirect)


@pytest.mark.parametrize(
    "value",
    ["http://pos.example.com", "pos.example.com/x", "*.example.com", "a b", "x:0", "[zz]:1"],
)
def test_a_public_host_that_is_not_a_host_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"LOYALTY_PUBLIC_HOST": value}, wallet=False)
    assert str(refused.value) == (
        f"LOYALTY_PUBLIC_HOST must be a host name as in the certificate, HOST or HOST:PORT, "
        f"got {value!r}"
    )


def test_every_https_response_gets_hsts_by_both_paths(pair: TlsFiles, tmp_path: Path) -> None:
    """The route table's response headers (what the server answers, direct responses)
    and every local reply mapper, the last one taking any status (Envoy's own replies):
    e2e tests/e2e/test_tls.py shows each path is needed."""
    rendered = tls_spec(pair).render(
        admin_socket=ADMIN_SOCKET, tls_secret_path=tmp_path / "sds.yaml"
    )
    manager = _listener(rendered)["filter_chains"][0]["filters"][0]["typed_config"]
    header = {
        "header": {"key": "strict-transport-security", "value": "max-age=31536000"},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    assert manager["route_config"]["response_headers_to_add"] == [header]
    mappers = manager["local_reply_config"]["mappers"]
    assert all(mapper["headers_to_add"] == [header] for mapper in mappers)
    assert mappers[-1]["filter"] == {
        "status_code_filter": {
            "comparison": {
                "op": "GE",
                "value": {"default_value": 0, "runtime_key": "loyalty.hsts_min_status"},
            }
        }
    }
    assert set(mappers[-1]) == {"filter", "headers_to_add"}  # changes nothing else
    # The backstop's own fields are untouched.
    committed = hcm(envoy_config.load_config())["local_reply_config"]["mappers"]
    assert [{k: v for k, v in m.items() if k != "headers_to_add"} for m in mappers[:-1]] == (
        committed
    )
    plain = tls_spec(None).render(admin_socket=ADMIN_SOCKET)
    assert "strict-transport-security" not in json.dumps(plain)
    assert envoy_tls.hsts_value(0) == "max-age=0"
    assert envoy_tls.hsts_value(60, include_subdomains=True) == ("max-age=60; includeSubDomains")


def test_hsts_settings() -> None:
    settings = Settings.from_env({}, wallet=False)
    assert (settings.hsts_max_age, settings.hsts_include_subdomains) == (31_536_000, False)
    env = {"LOYALTY_HSTS_MAX_AGE": "0", "LOYALTY_HSTS_INCLUDE_SUBDOMAINS": "1"}
    given = Settings.from_env(env, wallet=False)
    assert (given.hsts_max_age, given.hsts_include_subdomains) == (0, True)
    with pytest.raises(ConfigError, match=r"^LOYALTY_HSTS_MAX_AGE must be seconds from 0"):
        Settings.from_env({"LOYALTY_HSTS_MAX_AGE": "-1"}, wallet=False)


def test_the_envelope_lets_hsts_through() -> None:
    """envelope.lua removes every response header it does not allow."""
    lua = (envoy_config.find_gateway_dir() / "envelope.lua").read_text(encoding="utf-8")
    allowed = lua.split("local ALLOWED_HEADERS = {", 1)[1].split("}", 1)[0]
    assert '["strict-transport-security"] = true' in allowed


def test_tls_key_that_cannot_be_read_names_the_variable(pair: TlsFiles, tmp_path: Path) -> None:
    env = {"LOYALTY_TLS_CERT": str(pair.cert), "LOYALTY_TLS_KEY": str(tmp_path)}  # a folder
    with pytest.raises(ConfigError, match=r"^LOYALTY_TLS_KEY: cannot read .*: Is a directory"):
        Settings.from_env(env, wallet=False).tls_files()


# ---------------------------------------------------------------- mutual TLS to the servers


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
