"""Schema migrations (Alembic, scripts inside the package), run programmatically.

`upgrade(url)` is safe to call from several processes at once: it holds a PostgreSQL
advisory lock for the whole migration, in the migration's own transaction.

`check(url)` / `Schema.of(revision)` hold the one rule of whether this code may run on a
database (docs/deployment.md "Upgrades"): a schema older than the code needs is refused
(`loyalty serve`, `loyalty wallet send`: run `loyalty migrate` first); a revision the code
does not know was written by a later version, which migrations keep usable by the previous
one (expand now, contract a release later), so the code runs on it with a warning.

A contract revision (its module says `CONTRACT = True`) removes what the previous version
still uses. `upgrade` applies one to a database that already has a revision only when
asked (`loyalty migrate --contract`, once no server of the previous version runs); a
database with no revision goes straight to head. So this code needs only the revision
below its own contract revisions (`needed()`), and runs on every revision from there to
head.
"""

from __future__ import annotations

import enum
import functools
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

from loyalty_grpc.store import distribution
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


@functools.cache
def _shipped() -> tuple[tuple[str, ...], frozenset[str]]:
    """The package's revisions, oldest first, and its contract revisions: read once (the
    scripts do not change while the process runs)."""
    script = ScriptDirectory.from_config(_config())
    revisions = list(reversed(list(script.walk_revisions())))
    return (
        tuple(rev.revision for rev in revisions),
        frozenset(r.revision for r in revisions if getattr(r.module, "CONTRACT", False) is True),
    )


def head() -> str:
    """The newest revision the package ships."""
    revisions = _shipped()[0]
    if not revisions:
        raise RuntimeError("no migrations found")
    return revisions[-1]


def known() -> frozenset[str]:
    """Every revision the package ships (its whole history, head included)."""
    return frozenset(history())


def history() -> list[str]:
    """Every revision the package ships, oldest first."""
    return list(_shipped()[0])


def contracts() -> frozenset[str]:
    """The contract revisions: those the previous version cannot run on."""
    return _shipped()[1]


def needed() -> str:
    """The oldest revision this code runs on: head, less the contract revisions at its top
    (the previous version's servers may still run until they are applied)."""
    revisions, contract = history(), contracts()
    while len(revisions) > 1 and revisions[-1] in contract:
        revisions.pop()
    return revisions[-1]


def pending_contracts(applied: str | None) -> list[str]:
    """The contract revisions above `applied` (none for a database never migrated, which
    goes straight to head)."""
    if applied is None or applied not in known():
        return []
    revisions = history()
    return [r for r in revisions[revisions.index(applied) + 1 :] if r in contracts()]


class SchemaState(enum.Enum):
    CURRENT = "current"  # at the code's head
    CONTRACT_PENDING = "contract pending"  # at or past `needed()`, below head: usable
    BEHIND = "behind"  # never migrated, or older than `needed()`
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
        newest, revisions = head(), history()
        if applied == newest:
            state = SchemaState.CURRENT
        elif applied is None:
            state = SchemaState.BEHIND
        elif applied not in revisions:
            state = SchemaState.NEWER
        elif revisions.index(applied) >= revisions.index(needed()):
            state = SchemaState.CONTRACT_PENDING
        else:
            state = SchemaState.BEHIND
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
                f"{needed()}): run `{migrate_command}` first"
            )
        return (
            f"the database schema is at revision {self.applied}, older than this version "
            f"needs ({needed()}): run `{migrate_command}` first"
        )

    def contract_note(self, migrate_command: str) -> str:
        """The one line for a CONTRACT_PENDING schema: what is left and when to apply it."""
        left = ", ".join(pending_contracts(self.applied))
        return (
            f"the database schema is at revision {self.applied}; contract revision(s) {left} "
            f"wait for `{migrate_command} --contract`, to run once every server runs this "
            'version (docs/deployment.md "Upgrades")'
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


def upgrade(url: str, revision: str = "head", *, contract: bool = False) -> str | None:
    """Migrate the database at `url` (plain `postgresql://` accepted) to head (or to
    `revision`) and return the revision it is at. Already there, or to head on a schema
    newer than the code knows (a later version migrated it; see `Schema`): nothing happens,
    the latter with a warning. To head, a database that already has a revision stops below
    its first pending contract revision unless `contract` (see the module's docs). At head,
    on a Citus coordinator, the tables are then distributed (store/distribution.py)."""
    applied = _run(url, command.upgrade, revision, to_head=revision == "head", contract=contract)
    if applied == head():
        engine = _engine(url)
        try:
            distribution.distribute(engine)  # on a Citus coordinator (docs/citus.md)
        finally:
            engine.dispose()
    return applied


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` back to `revision` (tests of a migration's data)."""
    _run(url, command.downgrade, revision)


def _run(
    url: str,
    step: Callable[[Config, str], None],
    revision: str,
    *,
    to_head: bool = False,
    contract: bool = False,
) -> str | None:
    cfg = _config()
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(_LOCK_KEY)))
            applied = MigrationContext.configure(conn).get_current_revision()
            if to_head:
                if Schema.of(applied).state is SchemaState.NEWER:
                    log.warning("%s", Schema.of(applied).newer_warning())
                    return applied
                waiting = [] if contract else pending_contracts(applied)
                if waiting:
                    revisions = history()
                    revision = revisions[revisions.index(waiting[0]) - 1]
            cfg.attributes["connection"] = conn
            step(cfg, revision)
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
