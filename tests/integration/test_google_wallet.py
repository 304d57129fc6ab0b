"""Google Wallet provider against a local HTTP server that plays both Google's OAuth token
endpoint and the Wallet API (no real Google), with a throwaway service-account key."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from sqlalchemy import Engine, delete, insert, select

from loyalty_grpc.runtime.wallet import load_settings
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import fans, programas, wallet_outbox, wallet_pases
from loyalty_grpc.wallet import (
    FanPass,
    GoogleWalletProvider,
    LocalProvider,
    SendReport,
    WalletConfigError,
    WalletDeliveryError,
    WalletSettings,
    object_suffix,
    send_pending,
)
from loyalty_grpc.wallet.google import SCOPE
from tests.support import ADMIN_TOKEN

ISSUER = "3388000000012345678"
EMAIL = "wallet-sender@loyalty-test.iam.gserviceaccount.com"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
OBJECTS = "/walletobjects/v1/loyaltyObject/"


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeGoogle:
    """What the fake answers, and what it was asked."""

    url: str = ""
    requests: list[Seen] = field(default_factory=list)
    tokens_issued: int = 0
    expires_in: int = 3600
    # Status codes for the next PATCHes (then 200), and extra headers for them.
    statuses: list[int] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    # Object ids that do not exist (404).
    missing: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def patches(self) -> list[Seen]:
        return [r for r in self.requests if r.method == "PATCH"]

    def token_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path == "/token"]


def _handler(google: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> Seen:
            length = int(self.headers.get("Content-Length", "0"))
            parts = urlsplit(self.path)
            seen = Seen(
                self.command,
                parts.path,
                parts.query,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length),
            )
            with google.lock:
                google.requests.append(seen)
            return seen

        def _reply(
            self, status: int, payload: object, headers: dict[str, str] | None = None
        ) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            seen = self._record()
            if seen.path != "/token":
                self._reply(404, {"error": "not_found"})
                return
            with google.lock:
                google.tokens_issued += 1
                token = f"tok-{google.tokens_issued}"
            self._reply(
                200,
                {"access_token": token, "expires_in": google.expires_in, "token_type": "Bearer"},
            )

        def do_PATCH(self) -> None:
            seen = self._record()
            object_id = seen.path.removeprefix(OBJECTS)
            with google.lock:
                status = google.statuses.pop(0) if google.statuses else 200
                if object_id in google.missing:
                    status = 404
            if status != 200:
                self._reply(
                    status, {"error": {"code": status, "message": f"fake {status}"}}, google.headers
                )
                return
            self._reply(200, {"id": object_id, **json.loads(seen.body)})

    return Handler


@pytest.fixture
def google() -> Iterator[FakeGoogle]:
    fake = FakeGoogle()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.fixture(scope="module")
def private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def key_info(private_key: rsa.RSAPrivateKey, google: FakeGoogle) -> dict[str, str]:
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "loyalty-test",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": EMAIL,
        "client_id": "1",
        "token_uri": f"{google.url}/token",
    }


@pytest.fixture
def key_file(key_info: dict[str, str], tmp_path: Path) -> Path:
    path = tmp_path / "wallet-sa.json"
    path.write_text(json.dumps(key_info))
    return path


@pytest.fixture
def provider(key_info: dict[str, str], google: FakeGoogle) -> Iterator[GoogleWalletProvider]:
    wallet = GoogleWalletProvider.from_service_account_info(
        key_info, ISSUER, api_base=google.url, timeout=5
    )
    yield wallet
    wallet.close()


FAN = FanPass(fan_pk=1, programa_id="halcones", fan_id="HAL0001")


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verified_claims(assertion: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    """The JWT's claims, after checking its RS256 signature with the public key."""
    header, payload, signature = assertion.split(".")
    assert json.loads(_b64(header))["alg"] == "RS256"
    key.public_key().verify(
        _b64(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )
    claims: dict[str, Any] = json.loads(_b64(payload))
    return claims


# --- the provider --------------------------------------------------------------------------


def test_a_delivery_is_a_silent_patch_with_a_service_account_token(
    provider: GoogleWalletProvider,
    google: FakeGoogle,
    private_key: rsa.RSAPrivateKey,
) -> None:
    provider.deliver(FAN, 120)

    token_request, patch = google.requests
    assert token_request.method == "POST"
    assert token_request.path == "/token"
    form = parse_qs(token_request.body.decode())
    assert form["grant_type"] == [JWT_BEARER]
    claims = verified_claims(form["assertion"][0], private_key)
    assert claims["scope"] == SCOPE
    assert claims["iss"] == EMAIL
    # google-auth addresses the assertion to Google's token endpoint, whatever token_uri
    # the request goes to (what Google checks).
    assert claims["aud"] == "https://oauth2.googleapis.com/token"
    assert 0 < claims["exp"] - claims["iat"] <= 3600

    assert patch.method == "PATCH"
    assert patch.path == f"{OBJECTS}{ISSUER}.halcones.HAL0001"
    assert patch.query == ""
    assert patch.headers["authorization"] == "Bearer tok-1"
    assert patch.headers["content-type"] == "application/json"
    assert patch.body == b'{"loyaltyPoints":{"balance":{"int":120}}}'
    assert json.loads(patch.body) == {"loyaltyPoints": {"balance": {"int": 120}}}
    for seen in google.requests:
        for text in (seen.body.decode(), seen.query, seen.path):
            assert "notifyPreference" not in text
            assert "messages" not in text


def test_the_token_is_reused_across_deliveries(
    provider: GoogleWalletProvider, google: FakeGoogle
) -> None:
    provider.deliver(FAN, 1)
    provider.deliver(FanPass(2, "halcones", "HAL0002"), 2)
    provider.deliver(FAN, 3)
    assert len(google.token_requests()) == 1
    assert [p.headers["authorization"] for p in google.patches()] == ["Bearer tok-1"] * 3
    assert [json.loads(p.body)["loyaltyPoints"]["balance"]["int"] for p in google.patches()] == [
        1,
        2,
        3,
    ]


def test_a_token_close_to_expiry_is_replaced(
    provider: GoogleWalletProvider, google: FakeGoogle
) -> None:
    google.expires_in = 60  # within google-auth's refresh margin (several minutes)
    provider.deliver(FAN, 1)
    provider.deliver(FAN, 2)
    assert len(google.token_requests()) == 2
    assert [p.headers["authorization"] for p in google.patches()] == [
        "Bearer tok-1",
        "Bearer tok-2",
    ]


def test_a_401_gets_one_fresh_token(provider: GoogleWalletProvider, google: FakeGoogle) -> None:
    google.statuses = [401]
    provider.deliver(FAN, 5)
    assert [p.headers["authorization"] for p in google.patches()] == [
        "Bearer tok-1",
        "Bearer tok-2",
    ]


@pytest.mark.parametrize("status", [500, 502, 503, 429, 403])
def test_server_errors_are_retryable(
    provider: GoogleWalletProvider, google: FakeGoogle, status: int
) -> None:
    google.statuses = [status]
    with pytest.raises(WalletDeliveryError) as caught:
        provider.deliver(FAN, 5)
    assert not caught.value.permanent
    assert f"Google Wallet {status} for {ISSUER}.halcones.HAL0001: fake {status}" == str(
        caught.value
    )


def test_retry_after_is_passed_on(provider: GoogleWalletProvider, google: FakeGoogle) -> None:
    google.statuses = [503]
    google.headers = {"Retry-After": "7"}
    with pytest.raises(WalletDeliveryError) as caught:
        provider.deliver(FAN, 5)
    assert caught.value.retry_after == 7.0


@pytest.mark.parametrize("status", [404, 400, 410])
def test_no_pass_is_permanent(
    provider: GoogleWalletProvider, google: FakeGoogle, status: int
) -> None:
    google.statuses = [status]
    with pytest.raises(WalletDeliveryError) as caught:
        provider.deliver(FAN, 5)
    assert caught.value.permanent
    assert len(google.patches()) == 1


def test_an_unreachable_api_is_retryable(key_info: dict[str, str]) -> None:
    wallet = GoogleWalletProvider.from_service_account_info(
        key_info, ISSUER, api_base="http://127.0.0.1:9", timeout=2
    )
    try:
        # The token comes from the fake; the API port is closed.
        with pytest.raises(WalletDeliveryError) as caught:
            wallet.deliver(FAN, 1)
    finally:
        wallet.close()
    assert not caught.value.permanent
    assert "unreachable" in str(caught.value)


def test_a_balance_beyond_32_bits_is_permanent_and_not_sent(
    provider: GoogleWalletProvider,
    google: FakeGoogle,
) -> None:
    with pytest.raises(WalletDeliveryError) as caught:
        provider.deliver(FAN, 2**31)
    assert caught.value.permanent
    assert google.requests == []


def test_object_ids_use_only_allowed_characters_and_are_one_to_one(
    provider: GoogleWalletProvider,
    google: FakeGoogle,
) -> None:
    assert object_suffix("halcones", "HAL0001") == "halcones.HAL0001"
    assert object_suffix("halcones", "A_B/1") == "halcones.A_5FB_2F1"
    assert object_suffix("los_pumas-2", "Ñ.9-X") == "los_pumas-2._C3_91.9-X"
    assert object_suffix("halcones", "A_2F") != object_suffix("halcones", "A/")
    provider.deliver(FanPass(3, "halcones", "HAL#7?X"), 1)
    assert google.patches()[0].path == f"{OBJECTS}{ISSUER}.halcones.HAL_237_3FX"


# --- through the sender, with the database ------------------------------------------------------


def test_the_sender_delivers_the_latest_balance_to_google(
    engine: Engine,
    provider: GoogleWalletProvider,
    google: FakeGoogle,
) -> None:
    with engine.begin() as conn:
        conn.execute(delete(wallet_outbox))
        conn.execute(delete(wallet_pases))
    # A new transaction: Citus refuses to write a reference table (programas) after writing
    # several shards of a distributed one in the same transaction.
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="halcones", nombre="H", tasa_puntos="0.1"))
        pks = [
            int(
                conn.execute(
                    insert(fans)
                    .values(
                        programa_id="halcones",
                        fan_id=fan_id,
                        nombre=fan_id,
                        correo=f"{fan_id}@x.example",
                        socio_desde=2020,
                        qr_token=fan_id.lower(),
                    )
                    .returning(fans.c.pk)
                ).scalar_one()
            )
            for fan_id in ("HAL0001", "HAL0404")
        ]
    for puntos in (10, 25):
        with engine.begin() as conn:
            move_points(conn, "halcones", pks[0], puntos, Motivo.VENTA)
    with engine.begin() as conn:
        move_points(conn, "halcones", pks[1], 3, Motivo.VENTA)
    # HAL0404 has no pass: dropped, recorded, not retried.
    google.missing = {f"{ISSUER}.halcones.HAL0404"}

    report = send_pending(engine, provider)
    assert report == SendReport(claimed=2, delivered=1, dropped=1)
    bodies = {p.path.rsplit(".", 1)[1]: json.loads(p.body) for p in google.patches()}
    assert bodies == {
        "HAL0001": {"loyaltyPoints": {"balance": {"int": 35}}},
        "HAL0404": {"loyaltyPoints": {"balance": {"int": 3}}},
    }
    with engine.connect() as conn:
        errors = dict(
            conn.execute(select(wallet_pases.c.fan_pk, wallet_pases.c.ultimo_error)).all()
        )
        left = conn.execute(select(wallet_outbox.c.id)).all()
    assert errors[pks[0]] is None
    assert errors[pks[1]].startswith("permanente: Google Wallet 404 for ")
    assert left == []
    assert send_pending(engine, provider) == SendReport()


# --- configuration ----------------------------------------------------------------------------


def test_google_settings_from_the_environment(
    key_file: Path, google: FakeGoogle, engine: Engine
) -> None:
    settings = WalletSettings.from_env(
        {
            "LOYALTY_WALLET_PROVIDER": "google",
            "LOYALTY_GOOGLE_WALLET_ISSUER_ID": ISSUER,
            "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(key_file),
            "LOYALTY_GOOGLE_WALLET_API": google.url,
            "LOYALTY_WALLET_INTERVAL_SECONDS": "0.5",
        }
    )
    assert settings.interval == 0.5
    assert "PRIVATE KEY" not in repr(settings)
    wallet = settings.build_provider(engine)
    assert isinstance(wallet, GoogleWalletProvider)
    try:
        wallet.deliver(FAN, 9)
    finally:
        wallet.close()
    assert google.patches()[0].path == f"{OBJECTS}{ISSUER}.halcones.HAL0001"


def test_the_default_is_the_local_provider(engine: Engine) -> None:
    settings = WalletSettings.from_env({})
    assert (settings.provider, settings.interval) == ("local", 1.0)
    assert isinstance(settings.build_provider(engine), LocalProvider)


def _bad(tmp_path: Path, key_file: Path) -> dict[str, tuple[dict[str, str], str]]:
    google = {
        "LOYALTY_WALLET_PROVIDER": "google",
        "LOYALTY_GOOGLE_WALLET_ISSUER_ID": ISSUER,
        "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(key_file),
    }
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    user_key = tmp_path / "user.json"
    user_key.write_text(json.dumps({"type": "authorized_user"}))
    bad_key = tmp_path / "bad.json"
    bad_key.write_text(
        json.dumps(
            {**json.loads(key_file.read_text()), "private_key": "-----BEGIN PRIVATE KEY-----\nxx\n"}
        )
    )
    no_uri = tmp_path / "nouri.json"
    no_uri.write_text(json.dumps({**json.loads(key_file.read_text()), "token_uri": ""}))
    missing = str(tmp_path / "missing.json")
    return {
        "provider": (
            {"LOYALTY_WALLET_PROVIDER": "apple"},
            "LOYALTY_WALLET_PROVIDER must be one of local, google, got 'apple'",
        ),
        "interval": (
            {"LOYALTY_WALLET_INTERVAL_SECONDS": "0"},
            "LOYALTY_WALLET_INTERVAL_SECONDS must be a positive number, got '0'",
        ),
        "interval_text": (
            {"LOYALTY_WALLET_INTERVAL_SECONDS": "soon"},
            "LOYALTY_WALLET_INTERVAL_SECONDS must be a positive number, got 'soon'",
        ),
        "no_issuer": (
            {**google, "LOYALTY_GOOGLE_WALLET_ISSUER_ID": ""},
            "LOYALTY_WALLET_PROVIDER=google needs LOYALTY_GOOGLE_WALLET_ISSUER_ID",
        ),
        "issuer": (
            {**google, "LOYALTY_GOOGLE_WALLET_ISSUER_ID": "abc"},
            "LOYALTY_GOOGLE_WALLET_ISSUER_ID must be digits, got 'abc'",
        ),
        "api": (
            {**google, "LOYALTY_GOOGLE_WALLET_API": "ftp://x"},
            "LOYALTY_GOOGLE_WALLET_API must be an http(s) URL, got 'ftp://x'",
        ),
        "no_credentials": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": ""},
            "LOYALTY_WALLET_PROVIDER=google needs "
            "LOYALTY_GOOGLE_WALLET_CREDENTIALS (path of the service "
            "account's JSON key)",
        ),
        "missing": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": missing},
            f"LOYALTY_GOOGLE_WALLET_CREDENTIALS: cannot read {missing}: No such file or directory",
        ),
        "not_json": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(not_json)},
            f"LOYALTY_GOOGLE_WALLET_CREDENTIALS: {not_json} is not JSON",
        ),
        "user_key": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(user_key)},
            f"LOYALTY_GOOGLE_WALLET_CREDENTIALS: {user_key} is not a service "
            'account key ("type": "service_account")',
        ),
        "no_uri": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(no_uri)},
            f"LOYALTY_GOOGLE_WALLET_CREDENTIALS: {no_uri} lacks token_uri",
        ),
        "bad_key": (
            {**google, "LOYALTY_GOOGLE_WALLET_CREDENTIALS": str(bad_key)},
            f"LOYALTY_GOOGLE_WALLET_CREDENTIALS: {bad_key}: unusable key (",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "provider",
        "interval",
        "interval_text",
        "no_issuer",
        "issuer",
        "api",
        "no_credentials",
        "missing",
        "not_json",
        "user_key",
        "no_uri",
        "bad_key",
    ],
)
def test_bad_configuration_is_one_clear_line(
    case: str,
    tmp_path: Path,
    key_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environ, message = _bad(tmp_path, key_file)[case]
    with pytest.raises(WalletConfigError) as caught:
        WalletSettings.from_env(environ)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    for name in [*environ, "LOYALTY_WALLET_PROVIDER"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        load_settings()
    assert str(exited.value) == f"error: {caught.value}"


def test_settings_are_read_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loyalty up`/`serve` read the settings before anything starts (a bad value stops them
    with the one-line error)."""
    monkeypatch.setenv("LOYALTY_WALLET_PROVIDER", "nope")
    monkeypatch.setenv("LOYALTY_DATABASE_URL", "postgresql://unused.invalid/x")
    monkeypatch.setenv("LOYALTY_ADMIN_TOKEN", ADMIN_TOKEN)
    from loyalty_grpc.runtime.cli import main

    try:
        outcome: object = main(
            ["serve", "--grpc-host", "127.0.0.1", "--grpc-port", "0", "--workers", "1"]
        )
    except SystemExit as exited:
        outcome = exited.code if isinstance(exited.code, int) else str(exited.code)
    said = capsys.readouterr().err + (outcome if isinstance(outcome, str) else "")
    assert outcome not in (0, None)
    assert "LOYALTY_WALLET_PROVIDER must be one of" in said
