"""`loyalty backup restore`: a base backup copied into a new, empty data directory, set to
replay the archive (`restore_command`) up to a moment (`recovery_target_time`) or to its
end, then promote. Nothing runs PostgreSQL here: the operator starts it on the directory,
waits for it to leave recovery, and points the service at it (docs/backups.md)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from loyalty_grpc.domain.errors import LoyaltyError
from loyalty_grpc.domain.timestamps import format_iso_utc, parse_ts
from loyalty_grpc.runtime.backup import tools
from loyalty_grpc.runtime.backup.repository import Backup, BackupError, Repository
from loyalty_grpc.runtime.backup.wal import conf_value, restore_command

SKIPPED = {"backup_manifest"}  # pg_verifybackup's, not the server's


@dataclass(frozen=True)
class Restored:
    backup: Backup
    into: Path
    until: datetime | None


def parse_until(text: str, now: datetime | None = None) -> datetime:
    """--until as the service reads every timestamp (domain/timestamps.py)."""
    try:
        return parse_ts(text, now or datetime.now(UTC), campo="--until")
    except LoyaltyError as exc:
        raise BackupError(exc.detalle) from None


def restore(repo: Repository, into: Path, until: datetime | None) -> Restored:
    repo.require()
    _check_target(into)
    backups = repo.backups()
    backup = choose(backups, until)
    if until is not None:
        _check_archive_reaches(repo, until, backup.segment_bytes)
    source = repo.folder(backup.name)
    tools.run("pg_verifybackup", "--quiet", str(source))
    created = not into.exists()
    if created:
        into.mkdir(mode=0o700)
    try:
        _copy(source, into)
        (into / "recovery.signal").write_text("", encoding="utf-8")
        with (into / "postgresql.auto.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# loyalty backup restore: replay the archive, then promote\n")
            conf.write(f"restore_command = {conf_value(restore_command(repo.wal.resolve()))}\n")
            if until is not None:
                conf.write(f"recovery_target_time = {conf_value(until.isoformat())}\n")
            conf.write("recovery_target_action = 'promote'\n")
        _give_to_owner(into)
    except BaseException:
        if created:
            shutil.rmtree(into, ignore_errors=True)
        else:
            _empty(into)
        raise
    return Restored(backup, into, until)


def choose(backups: list[Backup], until: datetime | None) -> Backup:
    """The newest backup that ended before `until` (the newest one with no `until`)."""
    if not backups:
        raise BackupError("no finished backup to restore (`backup list`)")
    if until is None:
        return backups[-1]
    fitting = [b for b in backups if b.ended <= until]
    if not fitting:
        raise BackupError(
            f"--until {format_iso_utc(until)} is before the end of the oldest backup "
            f"({backups[0].name}, ended {format_iso_utc(backups[0].ended)}): "
            "nothing can be restored to that moment"
        )
    return fitting[-1]


def _check_archive_reaches(repo: Repository, until: datetime, segment_bytes: int) -> None:
    """Recovery to `until` needs a commit after it in the archive: without one PostgreSQL
    stops with `recovery ended before configured recovery target was reached` and does not
    start. A segment archived (file time) before `until` cannot hold one."""
    times = [
        (repo.wal / s.name(segment_bytes)).stat().st_mtime for s in repo.segments(segment_bytes)
    ]
    newest = datetime.fromtimestamp(max(times), UTC) if times else None
    if newest is None or newest <= until:
        when = format_iso_utc(newest) if newest else "never"
        raise BackupError(
            f"--until {format_iso_utc(until)} is after the newest archived segment "
            f"(archived {when}): PostgreSQL would end recovery before reaching it and refuse "
            "to start; to restore everything archived, leave out --until"
        )


def _check_target(into: Path) -> None:
    if into.is_symlink() or (into.exists() and not into.is_dir()):
        raise BackupError(f"--into {into} is not a folder")
    if into.exists():
        entries = sum(1 for _ in into.iterdir())
        if entries:
            raise BackupError(
                f"--into {into} is not empty ({entries} entries): a restore goes only into a "
                "new, empty data directory, never over one (nothing was changed)"
            )
    elif not into.parent.is_dir():
        raise BackupError(f"--into {into}: its parent folder does not exist")


def _copy(source: Path, into: Path) -> None:
    for entry in source.iterdir():
        if entry.name in SKIPPED:
            continue
        target = into / entry.name
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)


def _give_to_owner(into: Path) -> None:
    """Run as root, the copy is root's: hand it to the owner of the target folder, the user
    PostgreSQL runs as (it refuses a data directory that is not its own)."""
    stat = into.stat()
    if os.geteuid() != 0 or stat.st_uid == 0:
        return
    for folder, dirs, files in os.walk(into):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, stat.st_uid, stat.st_gid, follow_symlinks=False)


def _empty(into: Path) -> None:
    for entry in into.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
