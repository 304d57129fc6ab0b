"""`loyalty backup prune --keep N`: the newest N backups stay; older ones are deleted, and
with them the archived WAL before the oldest one kept (`pg_archivecleanup`), which no
restore from a kept backup reads. Restores to moments before that backup are then gone:
N is how far back the operator can go."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from loyalty_grpc.runtime.backup import tools
from loyalty_grpc.runtime.backup.repository import Backup, BackupError, Repository


@dataclass(frozen=True)
class Pruned:
    deleted: list[str]
    oldest_kept: Backup
    wal_before: str  # the first archived segment kept


def prune(repo: Repository, keep: int) -> Pruned:
    repo.require()
    if keep < 1:
        raise BackupError("--keep must be at least 1: without a backup nothing is restorable")
    backups = repo.backups()
    if not backups:
        raise BackupError("no finished backup: nothing to keep, nothing pruned")
    doomed, kept = backups[:-keep], backups[-keep:]
    oldest = kept[0]
    for backup in doomed:
        repo.record(backup.name).unlink()  # first: from here on it is unfinished, unused
        shutil.rmtree(repo.folder(backup.name))
    first_kept = oldest.first_segment.name(oldest.segment_bytes)
    if repo.wal.is_dir():
        tools.run("pg_archivecleanup", str(repo.wal), first_kept)
    return Pruned([b.name for b in doomed], oldest, first_kept)
