"""`loyalty wallet send`: deliver every due balance once and say what was done."""

from __future__ import annotations

from pathlib import Path

from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import open_database
from loyalty_grpc.runtime.schema import require_usable_schema
from loyalty_grpc.runtime.wallet import load_settings
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.wallet import drain, pending_fans
from loyalty_grpc.wallet.providers import SupportsClose


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
