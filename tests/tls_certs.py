"""Certificates made in the test (the `cryptography` package): a CA and server certificates
signed by it, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.pem)
        return path


def make_ca(name: str = "loyalty test CA") -> Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Ca(key=key, cert=cert)


@dataclass(frozen=True)
class ServerCert:
    cert_pem: bytes
    key_pem: bytes
    serial: int


def make_server_cert(
    ca: Ca, names: tuple[str, ...] = ("localhost", "127.0.0.1"), *, client: bool = False
) -> ServerCert:
    """A server certificate for `names` (DNS names or IP addresses), signed by `ca`;
    `client`: for clients too (mutual TLS: one certificate per process, either role)."""
    usages = [x509.OID_SERVER_AUTH, *([x509.OID_CLIENT_AUTH] if client else [])]
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return ServerCert(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=key_pem, serial=serial
    )


def install_pair(server: ServerCert, cert_path: Path, key_path: Path) -> None:
    """Put the pair in place as an operator rotating it would: each file written aside in
    the same folder, then renamed over the old one (key first, then certificate)."""
    for path, data in ((key_path, server.key_pem), (cert_path, server.cert_pem)):
        temporary = path.with_name(f".{path.name}.new")
        temporary.write_bytes(data)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)


def curl_http2(
    url: str, ca_file: Path, headers: dict[str, str], method: str = "GET"
) -> tuple[str, str]:
    """`curl --http2` verifying against `ca_file` (httpx speaks HTTP/2 only with the `h2`
    package, not installed here): ("HTTP-VERSION STATUS", body), e.g. ("2 200", ...)."""
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2",
            "-X",
            method,
            "--cacert",
            str(ca_file),
            *(item for name, value in headers.items() for item in ("-H", f"{name}: {value}")),
            "-w",
            "\n%{http_version} %{http_code}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    body, _, status = result.stdout.rpartition("\n")
    return status, body
