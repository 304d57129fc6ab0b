"""Mutual TLS on the gRPC port (LOYALTY_GRPC_TLS_CERT / _KEY / _CA, issue 13): `serve`
accepts only clients whose certificate chains to the CA; `admin`, `status`, `gateway run`
(Envoy, its health checks included) and `gateway reload` present theirs. Certificates are
made here (tests/tls_certs.py); one CA signs the server's, Envoy's and the operator's."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from loyalty_grpc.runtime.gateway.xds import WorkDir
from tests.e2e.processes import LOYALTY, Running, loyalty_env
from tests.e2e.sales_load import TOKEN, sales_key, serve
from tests.support import free_port
from tests.tls_certs import Ca, install_pair, make_ca, make_server_cert

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Identity:
    """A process's certificate and key files, and the CA file beside them."""

    cert: Path
    key: Path
    ca: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "LOYALTY_GRPC_TLS_CERT": str(self.cert),
            "LOYALTY_GRPC_TLS_KEY": str(self.key),
            "LOYALTY_GRPC_TLS_CA": str(self.ca),
        }

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.key.read_bytes(),
            certificate_chain=self.cert.read_bytes(),
        )


def _identity(root: Path, name: str, ca_file: Path, ca: Ca) -> Identity:
    folder = root / name
    folder.mkdir()
    cert, key = folder / "cert.pem", folder / "key.pem"
    install_pair(make_server_cert(ca, (HOST, "localhost"), client=True), cert, key)
    return Identity(cert=cert, key=key, ca=ca_file)


@dataclass(frozen=True)
class Pki:
    server: Identity
    operator: Identity
    rogue: Identity  # signed by another CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca, other = make_ca("loyalty grpc CA"), make_ca("someone else's CA")
    ca_file, other_file = ca.write(root / "ca.pem"), other.write(root / "other-ca.pem")
    return Pki(
        server=_identity(root, "server", ca_file, ca),
        operator=_identity(root, "operator", ca_file, ca),
        rogue=_identity(root, "rogue", other_file, other),
    )


@dataclass
class Served:
    port: int
    process: Running


@pytest.fixture
def served(tmp_path: Path, migrated_database: str, pki: Pki) -> Iterator[Served]:
    port = free_port()
    running = serve(tmp_path, "a", migrated_database, port, **pki.server.env)
    yield Served(port, running)
    if running.proc.poll() is None:
        assert running.stop(signal.SIGTERM) == 0, "\n".join(running.lines)


def _health(target: str, credentials: grpc.ChannelCredentials | None) -> str:
    channel = (
        grpc.insecure_channel(target)
        if credentials is None
        else grpc.secure_channel(target, credentials)
    )
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _loyalty(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOYALTY, *args],
        env=loyalty_env(LOYALTY_ADMIN_TOKEN=TOKEN, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_only_clients_with_a_certificate_of_the_ca_get_in(served: Served, pki: Pki) -> None:
    target = f"{HOST}:{served.port}"
    assert any("listening on" in line and "(mutual TLS)" in line for line in served.process.lines)
    assert _health(target, pki.operator.credentials()) == "SERVING"
    assert _health(target, None) == "UNAVAILABLE"  # plain gRPC: no handshake
    no_certificate = grpc.ssl_channel_credentials(root_certificates=pki.server.ca.read_bytes())
    assert _health(target, no_certificate) == "UNAVAILABLE"
    rogue = grpc.ssl_channel_credentials(
        root_certificates=pki.server.ca.read_bytes(),  # trusts the server...
        private_key=pki.rogue.key.read_bytes(),  # ...but is not one of ours
        certificate_chain=pki.rogue.cert.read_bytes(),
    )
    assert _health(target, rogue) == "UNAVAILABLE"
    # A client that does not trust the server's CA refuses it.
    assert _health(target, pki.rogue.credentials()) == "UNAVAILABLE"


def test_admin_and_status_present_the_operators_certificate(served: Served, pki: Pki) -> None:
    target = ("--target", f"{HOST}:{served.port}")
    listed = _loyalty("admin", *target, "programs", "list", **pki.operator.env)
    assert listed.returncode == 0, listed.stderr
    refused = _loyalty("admin", *target, "programs", "list")
    assert refused.returncode == 1
    assert "servicio_no_disponible" in refused.stdout + refused.stderr
    status = _loyalty("status", *target, **pki.operator.env)
    assert f"SERVING ({HOST}:{served.port})" in status.stdout
    half = _loyalty(
        "admin", *target, "programs", "list", LOYALTY_GRPC_TLS_CERT=str(pki.operator.cert)
    )
    assert half.returncode == 2
    assert half.stderr.startswith(
        "error: LOYALTY_GRPC_TLS_KEY must be set too when LOYALTY_GRPC_TLS_CERT is (all or none)"
    )


def test_the_gateway_forwards_and_health_checks_over_mutual_tls(
    served: Served, pki: Pki, tmp_path: Path
) -> None:
    key = sales_key(served.port, pki.operator.credentials())
    work = WorkDir(tmp_path / "envoy")
    http_port = free_port()
    gateway = Running(
        [
            "gateway",
            "run",
            "--http-port",
            str(http_port),
            "--http-host",
            HOST,
            "--upstream",
            f"{HOST}:{served.port}",
            "--work-dir",
            str(work.path),
        ],
        tmp_path,
        loyalty_env(**pki.server.env),
    )
    try:
        gateway.wait_for("with mutual TLS")
        answer = httpx.post(
            f"http://{HOST}:{http_port}/api/v1/ping",
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        admin = work.admin()
        assert [host.health for host in admin.upstream_hosts()] == ["healthy"]
        # The reload's own health check presents the gateway's certificate too.
        reloaded = _loyalty(
            "gateway", "reload", "--work-dir", str(work.path), "--upstream", f"{HOST}:{served.port}"
        )
        assert reloaded.returncode == 0, reloaded.stderr
    finally:
        assert gateway.stop(signal.SIGTERM) == 0
