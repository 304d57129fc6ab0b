"""Wallet configuration from the environment, checked at start-up.

- `LOYALTY_WALLET_PROVIDER`: `local` (default: deliveries recorded in `wallet_entregas`)
  or `google`;
- `LOYALTY_WALLET_INTERVAL_SECONDS`: how often the sender looks for due balances (default 1);
- `LOYALTY_GOOGLE_WALLET_ISSUER_ID`: the Google Wallet issuer id (digits), for `google`;
- `LOYALTY_GOOGLE_WALLET_CREDENTIALS`: path of the service account's JSON key, for `google`;
- `LOYALTY_GOOGLE_WALLET_API`: API base URL (default https://walletobjects.googleapis.com).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loyalty_grpc.store.db import Database
from loyalty_grpc.wallet.google import DEFAULT_API, GoogleWalletProvider
from loyalty_grpc.wallet.providers import LocalProvider, WalletProvider

PROVIDERS = ("local", "google")
# Fans a sender run claims: the local provider records a batch in one INSERT; Google is
# called once per fan (4 at a time), so a run of 100 stays well inside its lease.
BATCH = {"local": 1000, "google": 100}
_ISSUER_ID = re.compile(r"[0-9]+")
_URL = re.compile(r"https?://[^\s/]+(/\S*)?")


class WalletConfigError(ValueError):
    """The environment does not describe a usable wallet set-up (one line for the person)."""


@dataclass(frozen=True)
class WalletSettings:
    provider: str = "local"
    interval: float = 1.0
    issuer_id: str = ""
    api_base: str = DEFAULT_API
    # The parsed service-account key (never printed).
    credentials_info: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WalletSettings:
        """Read and check the variables; raises WalletConfigError naming the variable."""
        env = os.environ if environ is None else environ
        provider = env.get("LOYALTY_WALLET_PROVIDER", "").strip().lower() or "local"
        if provider not in PROVIDERS:
            raise WalletConfigError(
                f"LOYALTY_WALLET_PROVIDER must be one of {', '.join(PROVIDERS)}, "
                f"got {env['LOYALTY_WALLET_PROVIDER']!r}"
            )
        interval = _interval(env.get("LOYALTY_WALLET_INTERVAL_SECONDS", ""))
        if provider == "local":
            return cls(provider=provider, interval=interval)
        issuer_id = env.get("LOYALTY_GOOGLE_WALLET_ISSUER_ID", "").strip()
        if not issuer_id:
            raise WalletConfigError(
                "LOYALTY_WALLET_PROVIDER=google needs LOYALTY_GOOGLE_WALLET_ISSUER_ID"
            )
        if not _ISSUER_ID.fullmatch(issuer_id):
            raise WalletConfigError(
                f"LOYALTY_GOOGLE_WALLET_ISSUER_ID must be digits, got {issuer_id!r}"
            )
        api_base = env.get("LOYALTY_GOOGLE_WALLET_API", "").strip() or DEFAULT_API
        if not _URL.fullmatch(api_base):
            raise WalletConfigError(
                f"LOYALTY_GOOGLE_WALLET_API must be an http(s) URL, got {api_base!r}"
            )
        info = _service_account(env.get("LOYALTY_GOOGLE_WALLET_CREDENTIALS", "").strip())
        return cls(
            provider=provider,
            interval=interval,
            issuer_id=issuer_id,
            api_base=api_base,
            credentials_info=info,
        )

    @property
    def batch(self) -> int:
        """Fans one sender run claims (see BATCH)."""
        return BATCH[self.provider]

    def build_provider(self, engine: Database) -> WalletProvider:
        if self.provider == "google":
            return GoogleWalletProvider.from_service_account_info(
                self.credentials_info, self.issuer_id, api_base=self.api_base
            )
        return LocalProvider(engine)


def _interval(value: str) -> float:
    if not value.strip():
        return 1.0
    try:
        interval = float(value)
    except ValueError:
        interval = math.nan
    if not (math.isfinite(interval) and interval > 0):
        raise WalletConfigError(
            f"LOYALTY_WALLET_INTERVAL_SECONDS must be a positive number, got {value!r}"
        )
    return interval


def _service_account(path: str) -> Mapping[str, Any]:
    name = "LOYALTY_GOOGLE_WALLET_CREDENTIALS"
    if not path:
        raise WalletConfigError(
            f"LOYALTY_WALLET_PROVIDER=google needs {name} (path of the service account's JSON key)"
        )
    try:
        info = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as exc:
        raise WalletConfigError(f"{name}: cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise WalletConfigError(f"{name}: {path} is not JSON") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise WalletConfigError(
            f'{name}: {path} is not a service account key ("type": "service_account")'
        )
    missing = [k for k in ("client_email", "private_key", "token_uri") if not info.get(k)]
    if missing:
        raise WalletConfigError(f"{name}: {path} lacks {', '.join(missing)}")
    try:  # the private key must load
        GoogleWalletProvider.from_service_account_info(info, "0").close()
    except ValueError as exc:
        raise WalletConfigError(f"{name}: {path}: unusable key ({exc})") from None
    return info
