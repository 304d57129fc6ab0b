"""`loyalty up --demo` serving HTTPS, as an operator starts it: once with `--tls-cert` /
`--tls-key`, once with LOYALTY_TLS_CERT / LOYALTY_TLS_KEY and LOYALTY_HTTP_REDIRECT_PORT,
each on a fresh data directory with certificates made here (tests/tls_certs.py). The URL
`up` prints is https and serves a POS call verified against the test CA, over HTTP/1.1 and
HTTP/2; plain HTTP on that port gets no answer; the redirect port sends GET to https and
refuses POST; SIGINT stops everything, Envoy included. (Envoy's TLS itself, rotation,
TLS 1.1 and ALPN details: tests/e2e/test_tls.py.)"""

from __future__ import annotations

import re
import signal
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

from tests.e2e.processes import DEMO_KEY, READY_LINE, Running, demo_up_args, loyalty_env
from tests.support import free_port
from tests.tls_certs import curl_http2, install_pair, make_ca, make_server_cert

ROOT = Path(__file__).resolve().parents[2]
BANNER = re.compile(r"^loyalty is up: HTTP API (\S+)/api/v1 ")
DEMO_KEY_LINE = re.compile(r"^demo key \[[^\]]+\] .+?: (\S+)  permisos: ")
STARTS = ["flags", "env"]


@dataclass(frozen=True)
class Certs:
    ca_file: Path
    cert: Path
    key: Path


@dataclass
class UpTls:
    """A running `up --demo` with TLS, and what it printed."""

    running: Running
    data_dir: Path
    http_port: int
    redirect_port: int | None
    ca_file: Path
    envoy: psutil.Process

    @property
    def base(self) -> str:
        """The base URL of the banner's `HTTP API …/api/v1`."""
        found = [m.group(1) for line in self.running.lines if (m := BANNER.match(line))]
        assert len(found) == 1, "\n".join(self.running.lines)
        return found[0]

    @property
    def key_header(self) -> dict[str, str]:
        """The tour's key of "Caja Principal" (every permission), as `up` printed it."""
        keys = [m.group(1) for line in self.running.lines if (m := DEMO_KEY_LINE.match(line))]
        assert DEMO_KEY in keys, "\n".join(self.running.lines)
        return {"Authorization": f"Bearer {DEMO_KEY}"}

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    root = tmp_path_factory.mktemp("up-tls-certs")
    ca = make_ca()
    cert, key = root / "server.pem", root / "server.key"
    install_pair(make_server_cert(ca), cert, key)
    return Certs(ca_file=ca.write(root / "ca.pem"), cert=cert, key=key)


@contextmanager
def started(data_dir: Path, certs: Certs, *, by_env: bool) -> Iterator[UpTls]:
    http_port = free_port()
    redirect_port = free_port() if by_env else None
    args = demo_up_args(data_dir, http_port, "--workers", "1")
    if by_env:
        env = loyalty_env(
            LOYALTY_TLS_CERT=str(certs.cert),
            LOYALTY_TLS_KEY=str(certs.key),
            LOYALTY_HTTP_REDIRECT_PORT=str(redirect_port),
            LOYALTY_PUBLIC_HOST="127.0.0.1",
        )
    else:
        args += ["--tls-cert", str(certs.cert), "--tls-key", str(certs.key)]
        env = loyalty_env()
        for name in (
            "LOYALTY_TLS_CERT",
            "LOYALTY_TLS_KEY",
            "LOYALTY_HTTP_REDIRECT_PORT",
            "LOYALTY_PUBLIC_HOST",
        ):
            env.pop(name, None)
    running = Running(args, ROOT, env)
    try:
        running.wait_for(READY_LINE)
        envoys = [
            child
            for child in psutil.Process(running.proc.pid).children(recursive=True)
            if child.name() == "envoy"
        ]
        assert len(envoys) == 1, envoys
        yield UpTls(
            running=running,
            data_dir=data_dir,
            http_port=http_port,
            redirect_port=redirect_port,
            ca_file=certs.ca_file,
            envoy=envoys[0],
        )
    finally:
        if running.proc.poll() is None:  # test_sigint_stops_everything did not run
            running.stop(signal.SIGINT)


@pytest.fixture(scope="module")
def up_flags(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpTls]:
    with started(tmp_path_factory.mktemp("up-tls-flags"), certs, by_env=False) as up:
        yield up


@pytest.fixture(scope="module")
def up_env(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpTls]:
    with started(tmp_path_factory.mktemp("up-tls-env"), certs, by_env=True) as up:
        yield up


@pytest.fixture(params=STARTS)
def up(request: pytest.FixtureRequest) -> UpTls:
    started_up: UpTls = request.getfixturevalue(f"up_{request.param}")
    return started_up


def test_the_banner_names_the_https_url(up: UpTls) -> None:
    assert up.base == f"https://127.0.0.1:{up.http_port}"


def test_with_tls_the_api_listens_on_every_interface(up: UpTls) -> None:
    """HTTPS is for clients on the network: no --http-host means 0.0.0.0 (plain HTTP
    would be loopback only), and the banner says where it listens."""
    (line,) = [line for line in up.running.lines if BANNER.match(line)]
    assert "/api/v1 (listening on 0.0.0.0)  gRPC " in line
    listening = {
        (c.laddr.ip, c.laddr.port) for c in up.envoy.net_connections() if c.status == "LISTEN"
    }
    assert ("0.0.0.0", up.http_port) in listening


def test_a_pos_call_over_http11(up: UpTls) -> None:
    with httpx.Client(verify=up.context(), timeout=10) as client:
        response = client.post(f"{up.base}/api/v1/ping", headers=up.key_header)
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/1.1"
    body = response.json()
    assert body["ok"] is True
    assert body["data"]["integracion"] == "Caja Principal"
    assert body["data"]["programa"] == "Club Demo"


def test_a_pos_call_over_h2(up: UpTls) -> None:
    # httpx speaks HTTP/2 only with the `h2` package, not installed here: curl does.
    status, body = curl_http2(f"{up.base}/api/v1/ping", up.ca_file, up.key_header, "POST")
    assert status == "2 200", body
    assert '"ok":true' in body
    assert '"integracion":"Caja Principal"' in body


def test_plain_http_on_the_tls_port_gets_no_answer(up: UpTls) -> None:
    with (
        httpx.Client(timeout=5) as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)),
    ):
        client.post(f"http://127.0.0.1:{up.http_port}/api/v1/ping", headers=up.key_header)


def test_the_banner_names_the_redirect_port(up_env: UpTls) -> None:
    line = (
        f"plain HTTP on port {up_env.redirect_port}: redirects GET/HEAD to "
        "https://127.0.0.1, refuses the rest"
    )
    assert any(line in printed for printed in up_env.running.lines)


def test_the_redirect_port_sends_get_to_https(up_env: UpTls) -> None:
    plain = f"http://127.0.0.1:{up_env.redirect_port}/api/v1/ping?x=1"
    with httpx.Client(timeout=5) as client:
        response = client.get(plain, headers=up_env.key_header)
    assert response.status_code == 301, response.text
    location = response.headers["location"]
    assert location == f"{up_env.base}/api/v1/ping?x=1"
    with httpx.Client(verify=up_env.context(), timeout=10) as client:
        followed = client.get(location, headers=up_env.key_header)
    assert followed.status_code == 200, followed.text
    assert followed.json()["ok"] is True


def test_the_redirect_port_refuses_post(up_env: UpTls) -> None:
    plain = f"http://127.0.0.1:{up_env.redirect_port}/api/v1/ping"
    with httpx.Client(timeout=5) as client:
        response = client.post(plain, headers=up_env.key_header, json={})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["ok"] is False
    assert body["error"]["codigo"] == "solicitud_invalida"


def alive(process: psutil.Process) -> bool:
    """Running, not a zombie (psutil refuses a pid reused since)."""
    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_sigint_stops_everything(up: UpTls) -> None:
    """Last of the module: `up` exits 0 on Ctrl-C and its Envoy is gone."""
    code = up.running.stop(signal.SIGINT)
    assert code == 0, "\n".join(up.running.lines)
    assert up.running.lines[-1] == "stopped"
    deadline = time.monotonic() + 5
    while alive(up.envoy):
        assert time.monotonic() < deadline, f"Envoy (pid {up.envoy.pid}) outlived `up`"
        time.sleep(0.05)
    work_dir = str(up.data_dir / "envoy")
    left = [
        process.pid
        for process in psutil.process_iter(["cmdline", "status"])
        if process.info["status"] != psutil.STATUS_ZOMBIE
        and any(work_dir in part for part in process.info["cmdline"] or [])
    ]
    assert left == [], f"processes still running from {work_dir}"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{up.base}/api/v1/ping", verify=up.context(), timeout=2)
