"""`loyalty migrate`: apply the database migrations (LOYALTY_DATABASE_URL or the embedded
PostgreSQL in the data dir)."""

from __future__ import annotations

from pathlib import Path

from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.postgres import open_database
from loyalty_grpc.store import migrate


def migrate_command(data_dir: Path, database_url: str | None, *, contract: bool = False) -> int:
    db = open_database(data_dir, database_url)
    try:
        schema = migrate.Schema.of(migrate.upgrade(db.url, contract=contract))
        say(f"database at revision {schema.applied}")
        if schema.state is migrate.SchemaState.CONTRACT_PENDING:
            say(schema.contract_note(command("migrate")))
    finally:
        db.stop()
    return 0
