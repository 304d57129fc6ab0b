"""`loyalty backup take`: a base backup (`pg_basebackup`, plain format, with its manifest
and the WAL it needs streamed into it) in a new folder DIR/base/NAME, recorded once whole.

Refused when the server does not archive its WAL into DIR/wal: a base backup alone restores
only to the moment it ended, never to a later point. `take` waits (bounded) until the
backup's last segment is in DIR/wal, which proves the server archives there."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from loyalty_grpc.runtime.backup import tools
from loyalty_grpc.runtime.backup.repository import TAKING, Backup, BackupError, Repository
from loyalty_grpc.runtime.backup.wal import Segment

ARCHIVE_WAIT = 120.0  # seconds for the server to archive the backup's last segment


def take(repo: Repository, url: str, *, archive_wait: float = ARCHIVE_WAIT) -> Backup:
    """Take a base backup of the server of `url` into `repo` (BackupError: nothing kept)."""
    repo.require()
    if not repo.wal.is_dir():
        raise BackupError(
            f"{repo.wal} does not exist: it is the WAL archive the server's archive_command "
            "writes into (docs/backups.md); create it, owned by the server's user"
        )
    server = _server_facts(url)
    name = server.now.strftime("%Y%m%dT%H%M%SZ")
    folder = repo.folder(name)
    partial = repo.base / f"{name}{TAKING}"
    if folder.exists() or partial.exists():
        raise BackupError(f"{folder} already exists: one backup per second at most")
    repo.base.mkdir(exist_ok=True)
    conninfo, env = tools.libpq_conninfo(url)
    try:
        tools.run(
            "pg_basebackup",
            "--dbname",
            conninfo,
            "--pgdata",
            str(partial),
            "--format=plain",
            "--wal-method=stream",
            "--checkpoint=fast",
            "--label",
            f"loyalty backup {name}",
            env=env,
        )
        ended = _server_facts(url).now
        backup = _record(partial, name, server, ended)
        _wait_archived(repo, backup, archive_wait)
        partial.rename(folder)
        _write_durably(repo.record(name), backup.to_json())
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return backup


@dataclass(frozen=True)
class _Server:
    now: datetime  # its clock
    system_identifier: str
    version: str
    segment_bytes: int


def _server_facts(url: str) -> _Server:
    """The server's clock and identity; BackupError unless it archives its WAL."""
    try:
        with psycopg.connect(url.replace("+psycopg://", "://", 1), connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT clock_timestamp(), current_setting('archive_mode'),"
                " current_setting('archive_command'), current_setting('archive_library', true),"
                " (SELECT system_identifier FROM pg_control_system())::text,"
                " current_setting('server_version'),"
                " (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'),"
                " pg_is_in_recovery()"
            ).fetchone()
    except psycopg.Error as exc:
        raise BackupError(f"cannot reach the database: {type(exc).__name__}") from None
    assert row is not None
    now, mode, command, library, system_id, version, segment_bytes, recovering = row
    if mode == "off" or not (command or library):
        raise BackupError(
            f"WAL archiving is off on this server (archive_mode = {mode}, archive_command "
            f"{'set' if command else 'empty'}): a base backup without the WAL after it "
            "cannot be restored to any later point. Turn archiving on (LOYALTY_BACKUP_DIR "
            "for `up`'s embedded PostgreSQL, else the postgresql.conf lines of "
            "docs/backups.md) and restart PostgreSQL"
        )
    if recovering and mode != "always":
        raise BackupError(
            "this server is a standby with archive_mode = on (not `always`): it archives "
            "nothing; back up the primary"
        )
    return _Server(now.astimezone(UTC), str(system_id), str(version), int(segment_bytes))


def _record(folder: Path, name: str, server: _Server, ended: datetime) -> Backup:
    manifest = json.loads((folder / "backup_manifest").read_text(encoding="utf-8"))
    ranges = manifest["WAL-Ranges"]
    return Backup(
        name=name,
        started=server.now,
        ended=ended,
        timeline=int(ranges[-1]["Timeline"]),
        start_lsn=str(ranges[0]["Start-LSN"]),
        end_lsn=str(ranges[-1]["End-LSN"]),
        segment_bytes=server.segment_bytes,
        system_identifier=server.system_identifier,
        server_version=server.version,
    )


def _write_durably(path: Path, text: str) -> None:
    """`text` into `path` as a whole or not at all, on disk when this returns (the record
    is what makes the backup count)."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    temporary.rename(path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _wait_archived(repo: Repository, backup: Backup, wait: float) -> None:
    last: Segment = backup.last_segment
    name = last.name(backup.segment_bytes)
    deadline = time.monotonic() + wait
    while not (repo.wal / name).exists():
        if time.monotonic() > deadline:
            raise BackupError(
                f"the backup's last WAL segment {name} is not in {repo.wal} after {wait:.0f} "
                "s: the server's archive_command does not write there, or fails (see the "
                "server's log and pg_stat_archiver); the backup was not kept"
            )
        time.sleep(0.2)
