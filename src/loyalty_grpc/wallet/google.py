"""Google Wallet: set a loyalty object's points, silently.

`PATCH {api}/walletobjects/v1/loyaltyObject/{issuer_id}.{suffix}` with the body
`{"loyaltyPoints":{"balance":{"int":N}}}` and nothing else: no `notifyPreference` and no
`messages`, so Google updates the pass without notifying the fan (and without using the
notification quota).

Auth: a service account's key (the JSON file Google Cloud issues). google-auth signs an
RS256 assertion for the scope `wallet_object.issuer` and exchanges it at the key's
`token_uri` (OAuth 2.0 JWT bearer grant); the access token is reused until shortly before
it expires (google-auth's refresh threshold, a few minutes), and refreshed once more if
the API answers 401. We refresh the credentials ourselves rather than through
`AuthorizedSession`: recent google-auth makes that session start a background lookup of
the service account's "regional access boundary" at iamcredentials.googleapis.com on its
first request, a call this service does not need.

Object ids: `{issuer_id}.{suffix}`, suffix = `object_suffix(programa_id, fan_id)`; whoever
issues the passes ("Save to Google Wallet") must create the objects under these ids.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import requests
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import TokenState
from google.auth.transport.requests import Request
from google.oauth2 import service_account

from loyalty_grpc.domain.integers import INT32_MAX, INT32_MIN
from loyalty_grpc.wallet.providers import FanPass, WalletDeliveryError

SCOPE = "https://www.googleapis.com/auth/wallet_object.issuer"
DEFAULT_API = "https://walletobjects.googleapis.com"
# Google's loyaltyPoints.balance.int is a 32-bit integer.
# Answers that no retry of the same balance can fix: malformed (400), no such object:
# the fan has no pass (404), gone (410). Everything else (401 after a refresh, 403, 408,
# 429, 5xx, network errors) is retried: it is a configuration or service problem that
# may be fixed meanwhile.
_PERMANENT = frozenset({400, 404, 410})
# Characters Google allows in an object id besides the issuer prefix.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")


def object_suffix(programa_id: str, fan_id: str) -> str:
    """The pass's object id after `{issuer_id}.`: `{programa_id}.{fan_id}`, with every
    character of the Fan ID outside `[A-Za-z0-9.-]` (including `_`) written as `_` and two
    upper-case hex digits per UTF-8 byte. Program ids are `[a-z0-9_-]` (no `.`), so the
    first `.` separates the two parts and the mapping is one-to-one:
    ("halcones", "HAL0001") → "halcones.HAL0001", ("halcones", "A_B/1") →
    "halcones.A_5FB_2F1"."""
    escaped = "".join(
        ch if ch in _SAFE else "".join(f"_{b:02X}" for b in ch.encode()) for ch in fan_id
    )
    return f"{programa_id}.{escaped}"


class GoogleWalletProvider:
    """Delivers balances to Google Wallet loyalty objects. Thread-safe."""

    name = "google"

    def __init__(
        self,
        credentials: service_account.Credentials,
        issuer_id: str,
        *,
        api_base: str = DEFAULT_API,
        timeout: float = 10.0,
    ) -> None:
        self._credentials = credentials.with_scopes([SCOPE])
        self.issuer_id = issuer_id
        self._api = api_base.rstrip("/")
        self._timeout = timeout
        self._session = requests.Session()
        # google-auth's token call (POST to token_uri), bounded like ours.
        self._token_request = functools.partial(Request(self._session), timeout=timeout)
        self._token_lock = threading.Lock()

    @classmethod
    def from_service_account_info(
        cls,
        info: Mapping[str, Any],
        issuer_id: str,
        *,
        api_base: str = DEFAULT_API,
        timeout: float = 10.0,
    ) -> GoogleWalletProvider:
        """`info`: the parsed service-account key JSON (raises ValueError when it is not)."""
        credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            info, scopes=[SCOPE]
        )
        return cls(credentials, issuer_id, api_base=api_base, timeout=timeout)

    def object_id(self, fan: FanPass) -> str:
        return f"{self.issuer_id}.{object_suffix(fan.programa_id, fan.fan_id)}"

    def deliver(self, fan: FanPass, saldo: int) -> None:
        if not INT32_MIN <= saldo <= INT32_MAX:
            raise WalletDeliveryError(
                f"balance {saldo} does not fit Google's 32-bit points", permanent=True
            )
        object_id = self.object_id(fan)
        url = f"{self._api}/walletobjects/v1/loyaltyObject/{quote(object_id, safe='')}"
        # Only the points: no notifyPreference, no messages (a silent update).
        body = json.dumps(
            {"loyaltyPoints": {"balance": {"int": saldo}}}, separators=(",", ":")
        ).encode()
        response = self._patch(url, body, self._token())
        if response.status_code == 401:  # revoked or expired early: one fresh token
            response = self._patch(url, body, self._token(force=True))
        if response.ok:
            return
        detail = _error_text(response)
        message = f"Google Wallet {response.status_code} for {object_id}: {detail}"
        if response.status_code in _PERMANENT:
            raise WalletDeliveryError(message, permanent=True)
        raise WalletDeliveryError(message, retry_after=_retry_after(response))

    def close(self) -> None:
        self._session.close()

    def _token(self, *, force: bool = False) -> str:
        with self._token_lock:
            if force or self._credentials.token_state != TokenState.FRESH:
                try:
                    self._credentials.refresh(self._token_request)
                except (auth_exceptions.RefreshError, auth_exceptions.TransportError) as exc:
                    raise WalletDeliveryError(f"Google OAuth token: {exc}") from exc
            return str(self._credentials.token)

    def _patch(self, url: str, body: bytes, token: str) -> requests.Response:
        try:
            return self._session.patch(
                url,
                data=body,
                timeout=self._timeout,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
        except requests.RequestException as exc:
            raise WalletDeliveryError(f"Google Wallet unreachable: {exc}") from exc


def _error_text(response: requests.Response) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    return " ".join(str(message).split())[:200] or response.reason or ""


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
