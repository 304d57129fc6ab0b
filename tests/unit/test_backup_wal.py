"""runtime/backup/: WAL segment names and gaps, the archive command as PostgreSQL runs it
(`sh -c`, in the data directory), choosing the backup of a restore, reading --until, and
the database password kept off the tools' command lines."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from loyalty_grpc.runtime.backup.repository import Backup, BackupError
from loyalty_grpc.runtime.backup.restore import choose, parse_until
from loyalty_grpc.runtime.backup.tools import libpq_conninfo
from loyalty_grpc.runtime.backup.wal import (
    Segment,
    archive_command,
    archiving_lines,
    conf_value,
    gaps,
    restore_command,
)

MIB16 = 16 * 1024 * 1024


def test_segment_names_are_postgresql_s():
    assert Segment(1, 0x1FF).name(MIB16) == "0000000100000001000000FF"
    assert Segment.parse("0000000100000001000000FF", MIB16) == Segment(1, 0x1FF)
    assert Segment.parse("000000010000000100000FF.partial", MIB16) is None
    assert Segment.parse("00000002.history", MIB16) is None
    assert Segment.of_lsn(2, "1/FF000028", MIB16) == Segment(2, 0x1FF)
    assert Segment.of_lsn(1, "0/2000028", 64 * 1024 * 1024).name(64 * 1024 * 1024) == (
        "000000010000000000000000"
    )


def test_gaps_from_the_first_segment_on_its_timeline():
    first = Segment(1, 10)
    present = {Segment(1, n) for n in (8, 10, 11, 14, 15, 17)} | {Segment(2, 12)}
    assert gaps(present, first) == [
        (Segment(1, 12), Segment(1, 13)),
        (Segment(1, 16), Segment(1, 16)),
    ]
    assert gaps({Segment(1, 11)}, first) == [(first, first)]
    assert gaps(set(), first) == [(first, first)]
    assert gaps({Segment(1, n) for n in range(10, 20)}, first) == []


def _archive(tmp_path: Path, archive: Path, name: str, content: bytes):
    pgdata = tmp_path / "pgdata"
    (pgdata / "pg_wal").mkdir(parents=True, exist_ok=True)
    (pgdata / "pg_wal" / name).write_bytes(content)
    line = archive_command(archive).replace("%p", f"pg_wal/{name}").replace("%f", name)
    return subprocess.run(
        ["sh", "-c", line], cwd=pgdata, capture_output=True, text=True, check=False, timeout=30
    )


def test_the_archive_command_copies_once_and_never_overwrites(tmp_path: Path):
    archive = tmp_path / "my backups" / "wal"  # a space: quoted
    archive.mkdir(parents=True)
    name = "000000010000000000000003"
    first = _archive(tmp_path, archive, name, b"segment 3")
    assert first.returncode == 0, first.stderr
    assert (archive / name).read_bytes() == b"segment 3"
    assert sorted(p.name for p in archive.iterdir()) == [name]  # no temporary left
    again = _archive(tmp_path, archive, name, b"segment 3")  # sent again after a crash
    assert again.returncode == 0, again.stderr
    other = _archive(tmp_path, archive, name, b"something else")
    assert other.returncode == 1
    assert "exists with other content; not overwritten" in other.stderr
    assert (archive / name).read_bytes() == b"segment 3"


def test_the_restore_command_fails_for_a_segment_not_archived(tmp_path: Path):
    archive = tmp_path / "wal"
    archive.mkdir()
    (archive / "000000010000000000000003").write_bytes(b"3")
    for name, code in (("000000010000000000000003", 0), ("000000010000000000000004", 1)):
        line = restore_command(archive).replace("%f", name).replace("%p", "RECOVERYXLOG")
        done = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True, check=False)
        assert (done.returncode != 0) == bool(code)


def test_postgresql_conf_lines_quote_the_command():
    assert conf_value("cp 'a' b") == "'cp ''a'' b'"
    folder = Path("/srv/it's/wal")
    lines = archiving_lines(folder)
    assert lines[:2] == ["wal_level = replica", "archive_mode = on"]
    key, _, value = lines[2].partition(" = ")
    assert key == "archive_command"
    assert value == conf_value(archive_command(folder))
    assert value[1:-1].replace("''", "'") == archive_command(folder)


def _backup(name: str, ended: datetime) -> Backup:
    return Backup(name, ended - timedelta(minutes=1), ended, 1, "0/2000028", "0/2000100", MIB16,
                  "7", "17.0")  # fmt: skip


def test_restore_chooses_the_newest_backup_ended_before_the_moment():
    t = datetime(2026, 11, 27, 12, tzinfo=UTC)
    backups = [_backup("a", t), _backup("b", t + timedelta(hours=1))]
    assert choose(backups, None).name == "b"
    assert choose(backups, t + timedelta(minutes=59)).name == "a"
    assert choose(backups, t + timedelta(hours=1)).name == "b"
    with pytest.raises(BackupError, match="before the end of the oldest backup"):
        choose(backups, t - timedelta(seconds=1))
    with pytest.raises(BackupError, match="no finished backup"):
        choose([], t)


def test_until_is_read_as_the_service_reads_timestamps():
    now = datetime(2026, 11, 27, 12, tzinfo=UTC)
    assert parse_until("2026-11-27 10:00:00", now) == datetime(2026, 11, 27, 10, tzinfo=UTC)
    assert parse_until("2026-11-27T04:00:00-06:00", now) == datetime(2026, 11, 27, 10, tzinfo=UTC)
    with pytest.raises(BackupError, match="--until"):
        parse_until("ayer", now)
    with pytest.raises(BackupError, match=r"--until: .* tiene fecha pero no hora"):
        parse_until("2026-11-27", now)


def test_the_docs_show_the_lines_archive_settings_prints():
    page = (Path(__file__).parents[2] / "docs" / "backups.md").read_text(encoding="utf-8")
    command = "$ loyalty backup archive-settings --dir /srv/loyalty-backups\n"
    shown = page.split(command, 1)[1].split("```", 1)[0].splitlines()
    assert shown == archiving_lines(Path("/srv/loyalty-backups/wal"))


def test_the_password_reaches_postgresql_s_tools_in_the_environment_only():
    conninfo, env = libpq_conninfo(
        "postgresql+psycopg://loyalty:s3cr%40t@db1:5432,db2:5433/loyalty"
        "?target_session_attrs=read-write&sslmode=verify-full"
    )
    assert "s3cr" not in conninfo
    assert env == {"PGPASSWORD": "s3cr@t"}
    assert conninfo_to_dict(conninfo) == {
        "user": "loyalty",
        "dbname": "loyalty",
        "host": "db1,db2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
        "sslmode": "verify-full",
    }
    assert libpq_conninfo("postgresql://postgres@/loyalty?host=/run/pg")[1] == {}
    with pytest.raises(BackupError) as refused:
        libpq_conninfo("postgresql://u:hunter2@h:notaport:/x?=")
    assert "hunter2" not in str(refused.value)
