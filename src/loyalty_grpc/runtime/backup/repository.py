"""A backup folder (`--dir`, LOYALTY_BACKUP_DIR) as the `loyalty backup` commands lay it out:

    DIR/wal/                    the WAL archive (the server's archive_command writes it)
    DIR/base/NAME/              a base backup: a data directory with its backup_manifest
    DIR/base/NAME.json          what `take` recorded once the backup was whole (`Backup`)

NAME is the UTC time the backup started (`20261127T143005Z`). A folder without its .json
is a backup that did not finish: no command uses it, `check` reports it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from loyalty_grpc.runtime.backup.wal import DEFAULT_SEGMENT_BYTES, Segment

NAME = re.compile(r"[0-9]{8}T[0-9]{6}Z")
TAKING = ".taking"  # the suffix of a base backup being written


class BackupError(Exception):
    """A backup command cannot do what was asked; the message says why and what to do."""


@dataclass(frozen=True)
class Backup:
    """One finished base backup, as `take` recorded it (times: the server's clock)."""

    name: str
    started: datetime
    ended: datetime  # after pg_basebackup returned: every later moment is restorable
    timeline: int
    start_lsn: str
    end_lsn: str
    segment_bytes: int
    system_identifier: str
    server_version: str

    @property
    def first_segment(self) -> Segment:
        return Segment.of_lsn(self.timeline, self.start_lsn, self.segment_bytes)

    @property
    def last_segment(self) -> Segment:
        return Segment.of_lsn(self.timeline, self.end_lsn, self.segment_bytes)

    def to_json(self) -> str:
        values = asdict(self)
        values["started"] = self.started.isoformat()
        values["ended"] = self.ended.isoformat()
        return json.dumps(values, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Backup:
        values = json.loads(text)
        values["started"] = datetime.fromisoformat(values["started"])
        values["ended"] = datetime.fromisoformat(values["ended"])
        return cls(**values)


@dataclass(frozen=True)
class Repository:
    root: Path

    @property
    def wal(self) -> Path:
        return self.root / "wal"

    @property
    def base(self) -> Path:
        return self.root / "base"

    def folder(self, name: str) -> Path:
        return self.base / name

    def record(self, name: str) -> Path:
        return self.base / f"{name}.json"

    def backups(self) -> list[Backup]:
        """The finished backups, oldest first."""
        if not self.base.is_dir():
            return []
        found = []
        for path in sorted(self.base.glob("*.json")):
            if NAME.fullmatch(path.stem) and self.folder(path.stem).is_dir():
                try:
                    found.append(Backup.from_json(path.read_text(encoding="utf-8")))
                except (ValueError, TypeError, KeyError) as exc:
                    raise BackupError(f"{path}: not a record of `backup take` ({exc})") from None
        return sorted(found, key=lambda b: b.started)

    def unfinished(self) -> list[str]:
        """Folders under base/ with no record: backups that did not finish."""
        if not self.base.is_dir():
            return []
        return sorted(
            p.name for p in self.base.iterdir() if p.is_dir() and not self.record(p.name).exists()
        )

    def segments(self, segment_bytes: int) -> set[Segment]:
        """The whole segments in the archive."""
        if not self.wal.is_dir():
            return set()
        found = set()
        for path in self.wal.iterdir():
            segment = Segment.parse(path.name, segment_bytes)
            if segment is not None:
                found.add(segment)
        return found

    def require(self) -> None:
        if not self.root.is_dir():
            raise BackupError(f"{self.root} is not a folder (--dir, LOYALTY_BACKUP_DIR)")


def segment_bytes_of(backups: list[Backup]) -> int:
    return backups[0].segment_bytes if backups else DEFAULT_SEGMENT_BYTES
