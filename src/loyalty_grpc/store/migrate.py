"""Schema migrations (Alembic, scripts inside the package), run programmatically.

`upgrade(url)` is safe to call from several processes at once: it holds a PostgreSQL
advisory lock for the whole migration, in the migration's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
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


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` (plain `postgresql://` accepted) to head (or to
    `revision`). Already there: nothing happens."""
    _run(url, command.upgrade, revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` back to `revision` (tests of a migration's data)."""
    _run(url, command.downgrade, revision)


def _run(url: str, step: Callable[[Config, str], None], revision: str) -> None:
    cfg = _config()
    engine = create_engine(sqlalchemy_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))
            cfg.attributes["connection"] = conn
            step(cfg, revision)
    finally:
        engine.dispose()
