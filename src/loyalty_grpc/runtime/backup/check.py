"""`loyalty backup check`: every finished backup verified against its manifest
(`pg_verifybackup`: each file's checksum, and the WAL it needs), and the archive holding
every segment from the oldest backup's first one on, with no gap, through each backup's
last one. Problems are listed, not raised: the operator wants all of them at once."""

from __future__ import annotations

from dataclasses import dataclass, field

from loyalty_grpc.runtime.backup import tools
from loyalty_grpc.runtime.backup.repository import (
    Backup,
    BackupError,
    Repository,
    segment_bytes_of,
)
from loyalty_grpc.runtime.backup.wal import Segment, gaps


@dataclass
class Checked:
    backups: int = 0
    segments: int = 0
    spans: list[tuple[str, str]] = field(default_factory=list)  # per timeline: oldest, newest
    problems: list[str] = field(default_factory=list)


def check(repo: Repository) -> Checked:
    repo.require()
    result = Checked()
    backups = repo.backups()
    result.problems += [
        f"base/{name}: a backup that did not finish (no base/{name}.json); delete it"
        for name in repo.unfinished()
    ]
    if not backups:
        result.problems.append(f"no finished backup in {repo.base}")
        return result
    for backup in backups:
        try:
            tools.run("pg_verifybackup", "--quiet", str(repo.folder(backup.name)))
        except BackupError as exc:
            result.problems.append(f"base/{backup.name}: {exc}")
        result.backups += 1
    segment_bytes = segment_bytes_of(backups)
    present = repo.segments(segment_bytes)
    for timeline in sorted({b.timeline for b in backups}):
        _check_timeline(result, [b for b in backups if b.timeline == timeline], present)
    return result


def _check_timeline(result: Checked, backups: list[Backup], present: set[Segment]) -> None:
    """The archive from the oldest of `backups` (all on one timeline) on: no gap, and
    through each one's last segment."""
    segment_bytes = backups[0].segment_bytes
    first = backups[0].first_segment
    for low, high in gaps(present, first):
        what = low.name(segment_bytes)
        if high != low:
            what += f" to {high.name(segment_bytes)}"
        later = [b.name for b in backups if b.first_segment.number > high.number]
        result.problems.append(
            f"wal/: segment {what} missing: recovery cannot replay past it; "
            + (f"backups from {later[0]} on are not affected" if later else "no backup can")
        )
    on_line = sorted(s for s in present if s.timeline == first.timeline and s >= first)
    for backup in backups:
        if not on_line or on_line[-1] < backup.last_segment:
            result.problems.append(
                f"wal/: backup {backup.name} ends in segment "
                f"{backup.last_segment.name(segment_bytes)}, not archived"
            )
    if on_line:
        result.segments += len(on_line)
        span = (on_line[0].name(segment_bytes), on_line[-1].name(segment_bytes))
        result.spans.append(span)
