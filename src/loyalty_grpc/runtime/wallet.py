"""The wallet sender in the server process (`loyalty up`, `loyalty serve`; the command
`loyalty wallet send` is runtime/cli/wallet.py): its configuration and its engine."""

from __future__ import annotations

from sqlalchemy import Engine

from loyalty_grpc.store.db import parse_url
from loyalty_grpc.wallet import (
    WalletConfigError,
    WalletSender,
    WalletSettings,
)

# The sender's connections in pg_stat_activity.application_name.
SENDER_APPLICATION = "loyalty-wallet-sender"


def sender_url(database_url: str) -> str:
    """The database URL for the sender's own engine: its connections carry
    SENDER_APPLICATION as their application_name."""
    url = parse_url(database_url).update_query_dict({"application_name": SENDER_APPLICATION})
    return url.render_as_string(hide_password=False)


def load_settings() -> WalletSettings:
    """The LOYALTY_WALLET_* configuration; a one-line error and exit when it is wrong.
    Call before starting anything."""
    try:
        return WalletSettings.from_env()
    except WalletConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


def start_sender(engine: Engine, settings: WalletSettings) -> WalletSender:
    """A running sender on the server's engine (one pooled connection at a time)."""
    sender = WalletSender(
        engine, settings.build_provider(engine), interval=settings.interval, batch=settings.batch
    )
    sender.start()
    return sender
