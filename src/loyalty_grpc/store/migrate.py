"""Schema migrations (Alembic, scripts inside the package), run programmatically.

`upgrade(url)` is safe to call from several processes at once: it holds a PostgreSQL
advisory lock for the whole migration, in the migration's own transaction.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, select
from sqlalchemy.pool import NullPool

from loyalty_grpc.store.db import sqlalchemy_url

MIGRATIONS = Path(__file__).parent / "migrations"
# Arbitrary constant identifying "the loyalty schema migration" among advisory locks.
_LOCK_KEY = 0x10_7A_17_00


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head() -> str:
    """The newest revision the package ships."""
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    if revision is None:
        raise RuntimeError("no migrations found")
    return revision


def current(url: str) -> str | None:
    """The revision the database at `url` is at (None: never migrated)."""
    engine = create_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def upgrade(url: str) -> None:
    """Migrate the database at `url` (plain `postgresql://` accepted) to head. Already at
    head: nothing happens."""
    cfg = _config()
    engine = create_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
