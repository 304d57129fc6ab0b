"""The wallet sender in the server process (`loyalty up`, `loyalty serve`) and
`loyalty wallet send`."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import open_database
from loyalty_grpc.runtime.schema import require_usable_schema
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.wallet import (
    WalletConfigError,
    WalletSender,
    WalletSettings,
    drain,
    pending_fans,
)
from loyalty_grpc.wallet.providers import SupportsClose

# The sender's connections in pg_stat_activity.application_name.
SENDER_APPLICATION = "loyalty-wallet-sender"


def sender_url(database_url: str) -> str:
    """The database URL for the sender's own engine: its connections carry
    SENDER_APPLICATION as their application_name."""
    url = make_url(database_url).update_query_dict({"application_name": SENDER_APPLICATION})
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


def send_command(data_dir: Path, database_url: str | None, *, batch: int | None = None) -> int:
    """`loyalty wallet send`: run the sender until nothing is due, print what it did."""
    settings = load_settings()
    db = open_database(data_dir, database_url)
    try:
        require_usable_schema(db.url)  # the rule `loyalty serve` applies (runtime/schema.py)
    except BaseException:
        db.stop()
        raise
    engine = make_engine(db.url, pool_size=4)
    provider = settings.build_provider(engine)
    try:
        total = drain(engine, provider, batch=batch or settings.batch)
        pending, waiting = pending_fans(engine)
    finally:
        if isinstance(provider, SupportsClose):
            provider.close()
        engine.dispose()
        db.stop()
    say(
        f"wallet ({settings.provider}): {total.summary()}; "
        f"{pending} fans pending, {waiting} of them waiting for a retry"
    )
    return 0
