"""`loyalty migrate`: apply the database migrations (LOYALTY_DATABASE_URL or the embedded
PostgreSQL in the data dir)."""

from __future__ import annotations

from pathlib import Path

from loyalty_grpc.runtime.console import say
from loyalty_grpc.runtime.postgres import open_database
from loyalty_grpc.store import migrate


def migrate_command(data_dir: Path, database_url: str | None) -> int:
    db = open_database(data_dir, database_url)
    try:
        migrate.upgrade(db.url)
        say(f"database at revision {migrate.current(db.url)}")
    finally:
        db.stop()
    return 0
