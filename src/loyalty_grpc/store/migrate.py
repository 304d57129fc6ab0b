"""Schema migrations (Alembic, scripts inside the package), run programmatically.

`upgrade(url)` is safe to call from several processes at once: it holds a PostgreSQL
advisory lock for the whole migration, in the migration's own transaction.

`check(url)` / `Schema.of(revision)` hold the one rule of whether this code may run on a
database (docs/deployment.md "Upgrades"): a schema older than the code's head is refused (`loyalty
serve`, `loyalty wallet send`: run `loyalty migrate` first); a revision the code does
not know was written by a later version, which migrations keep usable by the previous
one (expand now, contract a release later), so the code runs on it with a warning.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.pool import NullPool

from loyalty_grpc.store.db import CONNECT_TIMEOUT_SECONDS, parse_url, sqlalchemy_url

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# Arbitrary constant identifying "the loyalty schema migration" among advisory locks.
_LOCK_KEY = 0x10_7A_17_00


def _engine(url: str) -> Engine:
    """A one-connection engine for `url`; a host that does not answer fails after
    CONNECT_TIMEOUT_SECONDS (unless the URL sets `connect_timeout`), like the server's."""
    timeout = (
        {}
        if "connect_timeout" in parse_url(url).query
        else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    )
    return create_engine(sqlalchemy_url(url), poolclass=NullPool, connect_args=timeout)


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


def known() -> frozenset[str]:
    """Every revision the package ships (its whole history, head included)."""
    script = ScriptDirectory.from_config(_config())
    return frozenset(rev.revision for rev in script.walk_revisions())


class SchemaState(enum.Enum):
    CURRENT = "current"  # at the code's head
    BEHIND = "behind"  # never migrated, or at an older revision of the code's history
    NEWER = "newer"  # at a revision the code does not know: a later version migrated it


@dataclass(frozen=True)
class Schema:
    """The database's schema as this code sees it."""

    applied: str | None
    head: str
    state: SchemaState

    @classmethod
    def of(cls, applied: str | None) -> Schema:
        """The rule, for a database at revision `applied` (None: never migrated)."""
        newest = head()
        if applied == newest:
            state = SchemaState.CURRENT
        elif applied is None or applied in known():
            state = SchemaState.BEHIND
        else:
            state = SchemaState.NEWER
        return cls(applied, newest, state)

    @property
    def usable(self) -> bool:
        """This code may run on it (NEWER with a warning: `newer_warning`)."""
        return self.state is not SchemaState.BEHIND

    def refusal(self, migrate_command: str) -> str:
        """The one line that refuses a BEHIND schema; `migrate_command` as the person types
        it (runtime/console.command("migrate"))."""
        if self.applied is None:
            return (
                f"the database is not migrated (no revision applied; this version needs "
                f"{self.head}): run `{migrate_command}` first"
            )
        return (
            f"the database schema is at revision {self.applied}, older than this version "
            f"needs ({self.head}): run `{migrate_command}` first"
        )

    def newer_warning(self) -> str:
        """The one log line for a NEWER schema."""
        return (
            f"the database schema is at revision {self.applied}, newer than this version "
            f"knows (its head is {self.head}): a later version migrated it; running on it, "
            "since migrations keep the previous version working (expand, then contract a "
            "release later)"
        )


def check(url: str) -> Schema:
    """The schema of the database at `url` as this code sees it (see `Schema.of`)."""
    return Schema.of(current(url))


def current(url: str) -> str | None:
    """The revision the database at `url` is at (None: never migrated)."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` (plain `postgresql://` accepted) to head (or to
    `revision`). Already there, or to head on a schema newer than the code knows (a later
    version migrated it; see `Schema`): nothing happens, the latter with a warning."""
    _run(url, command.upgrade, revision, skip_newer=revision == "head")


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` back to `revision` (tests of a migration's data)."""
    _run(url, command.downgrade, revision)


def _run(
    url: str, step: Callable[[Config, str], None], revision: str, *, skip_newer: bool = False
) -> None:
    cfg = _config()
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))
            if skip_newer:
                schema = Schema.of(MigrationContext.configure(conn).get_current_revision())
                if schema.state is SchemaState.NEWER:
                    log.warning("%s", schema.newer_warning())
                    return
            cfg.attributes["connection"] = conn
            step(cfg, revision)
    finally:
        engine.dispose()
