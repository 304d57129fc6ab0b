"""WAL segment names and the shell lines PostgreSQL runs to archive and restore them.

A segment's name is `TTTTTTTTXXXXXXXXYYYYYYYY` (timeline, then the segment number split in
two: PostgreSQL's XLogFileName). The archive is one folder of such files, plus the
`.partial`, `.backup` and `.history` files PostgreSQL archives beside them.

The archive command is a POSIX shell line (GNU coreutils), not a `loyalty` command: the
server runs it as its own user, who need not be able to read this installation, and once
per 16 MiB segment, where starting Python would cost more than the copy."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

SEGMENT = re.compile(r"(?P<tli>[0-9A-F]{8})(?P<log>[0-9A-F]{8})(?P<seg>[0-9A-F]{8})")
HISTORY = re.compile(r"[0-9A-F]{8}\.history")
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, order=True)
class Segment:
    """One WAL segment: its timeline and number (for a given segment size)."""

    timeline: int
    number: int

    def name(self, segment_bytes: int) -> str:
        per_log = 0x1_0000_0000 // segment_bytes
        return f"{self.timeline:08X}{self.number // per_log:08X}{self.number % per_log:08X}"

    @classmethod
    def parse(cls, name: str, segment_bytes: int) -> Segment | None:
        """The segment a file name holds, or None (history, partial, backup files...)."""
        found = SEGMENT.fullmatch(name)
        if found is None:
            return None
        per_log = 0x1_0000_0000 // segment_bytes
        return cls(int(found["tli"], 16), int(found["log"], 16) * per_log + int(found["seg"], 16))

    @classmethod
    def of_lsn(cls, timeline: int, lsn: str, segment_bytes: int) -> Segment:
        """The segment holding `lsn` (`X/Y`, as PostgreSQL writes one)."""
        return cls(timeline, parse_lsn(lsn) // segment_bytes)


def parse_lsn(lsn: str) -> int:
    high, _, low = lsn.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def gaps(present: set[Segment], first: Segment) -> list[tuple[Segment, Segment]]:
    """The runs of segments missing from `present` on `first`'s timeline, from `first` to
    the newest one present on it: (first missing, last missing) each."""
    numbers = sorted(s.number for s in present if s.timeline == first.timeline)
    missing: list[tuple[Segment, Segment]] = []
    expected = first.number
    for number in numbers:
        if number < expected:
            continue
        if number > expected:
            missing.append((Segment(first.timeline, expected), Segment(first.timeline, number - 1)))
        expected = number + 1
    if expected == first.number:  # not even `first`
        missing.append((first, first))
    return missing


def archive_command(archive: Path) -> str:
    """PostgreSQL's `archive_command` copying segment %p (named %f) into `archive`, durably
    and never over another file: copied to `%f.tmp`, fsynced, hard-linked to `%f` (which
    fails if `%f` exists: no overwrite, even racing), the folder fsynced; only then exit 0.
    A file already archived under that name succeeds if identical (the server may send a
    segment again after a crash) and fails, saying so, if not."""
    folder = shlex.quote(str(archive))
    return (
        f"f={folder}/%f; "
        'if [ -e "$f" ]; then cmp -s %p "$f" || '
        '{ echo "archive: $f exists with other content; not overwritten" >&2; exit 1; }; '
        'else cp %p "$f.tmp" && sync "$f.tmp" && ln "$f.tmp" "$f" && rm "$f.tmp" && '
        f"sync {folder}; fi"
    )


def restore_command(archive: Path) -> str:
    """PostgreSQL's `restore_command`: segment %f from `archive` to %p (a missing file
    fails, which tells recovery the archive ends there)."""
    return f"cp {shlex.quote(str(archive))}/%f %p"


def conf_value(text: str) -> str:
    """`text` as a postgresql.conf string value (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def archiving_lines(archive: Path) -> list[str]:
    """The postgresql.conf lines that archive every segment into `archive`."""
    return [
        "wal_level = replica",
        "archive_mode = on",
        f"archive_command = {conf_value(archive_command(archive))}",
    ]
