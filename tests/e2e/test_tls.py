"""HTTPS at the gateway: a real Envoy with TLS (certificate by SDS from files made here)
in front of the real server: h2 and HTTP/1.1 by ALPN, a wrong certificate refused by the
client, TLS 1.1 refused, no plain HTTP on the port, a rotation of the certificate
(renamed into place) during traffic without a failed call; Strict-Transport-Security on
every HTTPS response (the server's, Envoy's own replies, a dead upstream's 503), and a
redirect port that sends clients to the configured public host whatever their Host."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from loyalty_grpc.runtime.gateway.config import (
    find_gateway_dir,
)
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.gateway.reload import reload
from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from tests.e2e.stack import Stack
from tests.support import free_port
from tests.tls_certs import Ca, curl_http2, install_pair, make_ca, make_server_cert

HOST = "127.0.0.1"


@dataclass
class TlsGateway:
    proxy: EnvoyProcess
    ca: Ca
    ca_file: Path
    cert: Path
    key: Path
    serial: int
    key_header: dict[str, str]
    redirect_port: int

    @property
    def port(self) -> int:
        return self.proxy.http_port

    def url(self, path: str = "/api/v1/ping") -> str:
        return f"https://localhost:{self.port}{path}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="module")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsGateway]:
    root = tmp_path_factory.mktemp("tls")
    certs = root / "certs"
    certs.mkdir()
    ca = make_ca()
    ca_file = ca.write(root / "ca.pem")
    first = make_server_cert(ca)
    cert, key = certs / "server.pem", certs / "server.key"
    install_pair(first, cert, key)
    redirect_port = free_port()
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(),
            listen_host=HOST,
            upstreams=(stack.grpc_target,),
            tls=TlsFiles(cert=cert, key=key),
            redirect_port=redirect_port,
            public_host="localhost",
        ),
        work_dir=root / "envoy",
    )
    try:
        yield TlsGateway(
            proxy=proxy,
            ca=ca,
            ca_file=ca_file,
            cert=cert,
            key=key,
            serial=first.serial,
            key_header={"Authorization": f"Bearer {stack.keys['todo']}"},
            redirect_port=redirect_port,
        )
    finally:
        proxy.stop()


def served_serial(gateway: TlsGateway) -> int:
    """The serial of the certificate a new TLS connection gets."""
    with (
        socket.create_connection((HOST, gateway.port), timeout=5) as raw,
        gateway.context().wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_http11_over_tls_verified_against_the_test_ca(gateway: TlsGateway) -> None:
    with httpx.Client(verify=gateway.context(), timeout=10) as client:
        response = client.get(gateway.url(), headers=gateway.key_header)
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/1.1"
    assert response.json()["ok"] is True
    assert gateway.proxy.url.startswith("https://")


def test_h2_by_alpn(gateway: TlsGateway) -> None:
    status, body = curl_http2(gateway.url(), gateway.ca_file, gateway.key_header)
    assert status == "2 200", body
    assert '"ok":true' in body


def test_alpn_offers_h2_then_http11(gateway: TlsGateway) -> None:
    for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")):
        context = gateway.context()
        context.set_alpn_protocols(offered)
        with (
            socket.create_connection((HOST, gateway.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            assert tls.selected_alpn_protocol() == chosen
            assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_another_ca_is_refused_by_the_client(gateway: TlsGateway, tmp_path: Path) -> None:
    other = make_ca("another CA").write(tmp_path / "other-ca.pem")
    context = ssl.create_default_context(cafile=str(other))
    with (
        httpx.Client(verify=context, timeout=10) as client,
        pytest.raises(httpx.ConnectError, match=r"CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(gateway.url(), headers=gateway.key_header)


def test_a_certificate_for_another_name_is_refused_by_the_client(gateway: TlsGateway) -> None:
    with (
        socket.create_connection((HOST, gateway.port), timeout=5) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|match"),
    ):
        gateway.context().wrap_socket(raw, server_hostname="pos.other.example")


def test_tls_1_1_is_refused(gateway: TlsGateway) -> None:
    context = gateway.context()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = ssl.TLSVersion.TLSv1_1
            context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
    except (ValueError, ssl.SSLError) as exc:  # pragma: no cover - depends on OpenSSL
        pytest.skip(f"this ssl module cannot offer TLS 1.1: {exc}")
    # The server's alert (a client unable to offer TLS 1.1 would fail with "no protocols
    # available" instead).
    with (
        socket.create_connection((HOST, gateway.port), timeout=5) as raw,
        pytest.raises(ssl.SSLError, match=r"PROTOCOL_VERSION|UNSUPPORTED_PROTOCOL"),
    ):
        context.wrap_socket(raw, server_hostname="localhost")


def test_no_plain_http_on_the_port(gateway: TlsGateway) -> None:
    with (
        httpx.Client(timeout=5) as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)),
    ):
        client.get(f"http://{HOST}:{gateway.port}/api/v1/ping", headers=gateway.key_header)


def test_rotation_during_traffic_without_a_failed_call(gateway: TlsGateway, tmp_path: Path) -> None:
    assert served_serial(gateway) == gateway.serial
    stop = threading.Event()
    failures: list[str] = []
    calls = [0]

    def traffic(reuse: bool) -> None:
        # One client keeps its connection; the other opens one per call (a new handshake
        # each time, so some land right at the rotation).
        client = httpx.Client(verify=gateway.context(), timeout=10)
        try:
            while not stop.is_set():
                if not reuse:
                    client.close()
                    client = httpx.Client(verify=gateway.context(), timeout=10)
                try:
                    response = client.get(gateway.url(), headers=gateway.key_header)
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))
                    continue
                calls[0] += 1
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:200]}")
        finally:
            client.close()

    threads = [threading.Thread(target=traffic, args=(reuse,)) for reuse in (True, False, False)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        new = make_server_cert(gateway.ca)
        install_pair(new, gateway.cert, gateway.key)
        deadline = time.monotonic() + 15
        while served_serial(gateway) != new.serial:
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.1)
        time.sleep(1.0)  # traffic on the new certificate too
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []
    assert calls[0] > 20
    assert served_serial(gateway) == new.serial
    gateway.serial = new.serial


def test_the_redirect_port_forwards_nothing(gateway: TlsGateway) -> None:
    """LOYALTY_HTTP_REDIRECT_PORT: GET/HEAD get a 301 to https on the public host and the
    TLS port, any other method a 400 envelope; no call reaches the server."""
    base = f"http://{HOST}:{gateway.redirect_port}"
    with httpx.Client(timeout=5) as client:
        for method in ("GET", "HEAD"):
            response = client.request(method, f"{base}/api/v1/ping?x=1")
            assert response.status_code == 301, response.text
            assert response.headers["location"] == gateway.url("/api/v1/ping?x=1")
            assert "strict-transport-security" not in response.headers  # plain HTTP
        response = client.post(f"{base}/api/v1/ping", headers=gateway.key_header, json={})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["ok"] is False
    assert body["error"]["codigo"] == "solicitud_invalida"
    assert "HTTPS" in body["error"]["detalle"]


def test_a_reload_keeps_tls(gateway: TlsGateway, tmp_path: Path) -> None:
    """`gateway reload` renders the gateway folder again with the TLS files it started
    with: a changed listener (here a new openapi.json) still serves HTTPS only."""
    folder = tmp_path / "gateway"
    shutil.copytree(find_gateway_dir(), folder)
    openapi = folder / "openapi.json"
    openapi.write_text(openapi.read_text() + "\n")
    reloaded = reload(gateway.proxy.work_dir, gateway_dir=folder)
    assert "listeners" in reloaded.changed
    try:
        with httpx.Client(verify=gateway.context(), timeout=10) as client:
            response = client.get(gateway.url("/api/v1/openapi.json"))
        assert response.status_code == 200
        assert response.content == openapi.read_bytes()
        test_no_plain_http_on_the_port(gateway)
    finally:
        reload(gateway.proxy.work_dir, gateway_dir=find_gateway_dir())


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:443",
        "localhost.evil.example",
        "evil.example/x",
        "[::1]:1",
        "",
    ],
)
def test_the_redirect_never_follows_the_request_host(gateway: TlsGateway, host: str) -> None:
    """The Location is the configured public host (LOYALTY_PUBLIC_HOST), never the Host a
    client sent: a link to http://pos.example with `Host: evil.example` must not send a
    terminal (and its key, on the next call) to evil.example."""
    connection = http.client.HTTPConnection(HOST, gateway.redirect_port, timeout=5)
    try:
        connection.putrequest("GET", "/api/v1/ping?x=1", skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    if response.status == 400:  # a Host Envoy refuses outright (malformed): no redirect
        return
    assert response.status == 301
    assert response.getheader("location") == gateway.url("/api/v1/ping?x=1")


# ---------------------------------------------------------------- HSTS

HSTS = "max-age=31536000"


def _hsts(response: httpx.Response) -> list[str]:
    return response.headers.get_list("strict-transport-security")


def test_every_https_answer_carries_hsts(gateway: TlsGateway) -> None:
    """The server's successes and errors, and the replies Envoy makes itself (a route
    that does not exist, a body too large, the request check's 400, the OpenAPI document,
    a native gRPC call, a method the transcoder does not know): one header, one year."""
    big = {"fan": "x" * (2 * 1024 * 1024)}
    with httpx.Client(verify=gateway.context(), timeout=10) as client:
        answers = {
            "ok": client.get(gateway.url(), headers=gateway.key_header),
            "server error": client.get(
                gateway.url(), headers={"Authorization": "Bearer lp_vivo_" + "Z" * 30}
            ),
            "no key": client.post(gateway.url("/api/v1/tx"), json={}),
            "no route": client.get(gateway.url("/nada"), headers=gateway.key_header),
            "wrong method": client.delete(gateway.url(), headers=gateway.key_header),
            "too large": client.post(
                gateway.url("/api/v1/fan/resolve"), headers=gateway.key_header, json=big
            ),
            "request check": client.post(
                gateway.url("/api/v1/fan/resolve"),
                headers={**gateway.key_header, "Content-Type": "application/json"},
                content=b'{"fan": "x",}',
            ),
            "openapi": client.get(gateway.url("/api/v1/openapi.json")),
            "grpc": client.post(
                gateway.url("/loyalty.v1.PosService/Ping"),
                headers={"Content-Type": "application/grpc"},
                content=b"\0\0\0\0\0",
            ),
        }
    statuses = {name: response.status_code for name, response in answers.items()}
    assert statuses["ok"] == 200
    assert statuses["no route"] == 404
    assert statuses["too large"] == 413
    assert statuses["request check"] == 400
    assert statuses["openapi"] == 200
    assert statuses["server error"] == 401
    for name, response in answers.items():
        assert _hsts(response) == [HSTS], (name, response.status_code, response.headers)


def test_hsts_over_http2_too(gateway: TlsGateway) -> None:
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2",
            "--cacert",
            str(gateway.ca_file),
            "-o",
            "/dev/null",
            "-D",
            "-",
            gateway.url("/nada"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.strip().lower() for line in done.stdout.splitlines()]
    assert lines[0].startswith("http/2 404")
    assert lines.count(f"strict-transport-security: {HSTS}") == 1


def test_envoys_503_for_a_dead_server_carries_hsts_and_the_setting_applies(
    tmp_path: Path,
) -> None:
    """No server behind the gateway: Envoy's 503 (the local reply mapper's backstop path)
    carries the header too, here with LOYALTY_HSTS_MAX_AGE=0 (browsers forget the policy)
    and LOYALTY_HSTS_INCLUDE_SUBDOMAINS."""
    ca = make_ca()
    cert, key = tmp_path / "certs" / "server.pem", tmp_path / "certs" / "server.key"
    cert.parent.mkdir()
    install_pair(make_server_cert(ca), cert, key)
    proxy = EnvoyProcess.start_spec(
        gateway_spec(
            http_port=free_port(),
            listen_host=HOST,
            upstreams=(f"{HOST}:{free_port()}",),
            tls=TlsFiles(cert=cert, key=key),
            hsts_max_age=0,
            hsts_include_subdomains=True,
        ),
        work_dir=tmp_path / "envoy",
    )
    try:
        context = ssl.create_default_context(cafile=str(ca.write(tmp_path / "ca.pem")))
        with httpx.Client(verify=context, timeout=10) as client:
            response = client.post(
                f"https://localhost:{proxy.http_port}/api/v1/ping",
                headers={"Authorization": "Bearer lp_vivo_" + "Q" * 30},
                json={},
            )
    finally:
        proxy.stop()
    assert response.status_code == 503, response.text
    assert response.json()["error"]["codigo"] == "servicio_no_disponible"
    assert _hsts(response) == ["max-age=0; includeSubDomains"]
