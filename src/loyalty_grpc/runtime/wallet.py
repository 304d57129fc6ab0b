"""The wallet sender in the server process (`loyalty up`, `loyalty serve`) and
`loyalty wallet send`."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import open_database
from loyalty_grpc.store import migrate
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.wallet import (
    SendReport,
    WalletConfigError,
    WalletSender,
    WalletSettings,
    pending_fans,
    send_pending,
)
from loyalty_grpc.wallet.providers import SupportsClose


def load_settings() -> WalletSettings:
    """The LOYALTY_WALLET_* configuration; a one-line error and exit when it is wrong.
    Call before starting anything."""
    try:
        return WalletSettings.from_env()
    except WalletConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


def start_sender(engine: Engine, settings: WalletSettings) -> WalletSender:
    """A running sender on the server's engine (one pooled connection at a time)."""
    sender = WalletSender(engine, settings.build_provider(engine), interval=settings.interval)
    sender.start()
    return sender


def send_command(data_dir: Path, *, batch: int = 100) -> int:
    """`loyalty wallet send`: run the sender until nothing is due, print what it did."""
    settings = load_settings()
    db = open_database(data_dir)
    if migrate.current(db.url) != migrate.head():
        db.stop()
        raise SystemExit("error: the database is not migrated; run `loyalty migrate` first")
    engine = make_engine(db.url, pool_size=4)
    provider = settings.build_provider(engine)
    try:
        total = SendReport()
        while True:
            report = send_pending(engine, provider, batch=batch)
            total += report
            if report.claimed == 0:
                break
        pending, waiting = pending_fans(engine)
    finally:
        if isinstance(provider, SupportsClose):
            provider.close()
        engine.dispose()
        db.stop()
    say(f"wallet ({settings.provider}): {total.summary()}; "
        f"{pending} fans pending, {waiting} of them waiting for a retry")
    return 0
