"""`loyalty backup` refuses, with a precise message and nothing changed: a base backup of a
server that does not archive its WAL, a backup folder without its archive, a restore into
a folder that is not empty, an --until it cannot read, a command with no backup folder.
(A gap in the archive, a corrupted backup and a moment before the oldest backup need a
real backup: tests/reliability/test_backup_restore.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from loyalty_grpc.runtime.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["backup", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "backups" / "wal").mkdir(parents=True)
    return tmp_path / "backups"


def test_take_refuses_a_server_that_does_not_archive_its_wal(
    repo: Path,
    create_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    monkeypatch.setenv("LOYALTY_DATABASE_URL", create_database())
    code, _, err = run(capsys, "take", "--dir", str(repo))
    assert code == 1
    assert err.startswith("error: WAL archiving is off on this server (archive_mode = off")
    assert "cannot be restored to any later point" in err
    assert not (repo / "base").exists()


def test_take_refuses_a_folder_without_its_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("LOYALTY_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    code, _, err = run(capsys, "take", "--dir", str(tmp_path))
    assert code == 1
    assert err == (
        f"error: {tmp_path}/wal does not exist: it is the WAL archive the server's "
        "archive_command writes into (docs/backups.md); create it, owned by the server's user\n"
    )


def test_restore_refuses_a_folder_that_is_not_empty(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    target = tmp_path / "pgdata"
    target.mkdir()
    (target / "PG_VERSION").write_text("17\n")
    code, _, err = run(capsys, "restore", "--dir", str(repo), "--into", str(target))
    assert code == 1
    assert f"--into {target} is not empty (1 entries)" in err
    assert "never over one (nothing was changed)" in err
    assert [p.name for p in target.iterdir()] == ["PG_VERSION"]


def test_restore_reads_until_as_the_service_reads_timestamps(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    target = tmp_path / "pgdata"
    code, _, err = run(
        capsys, "restore", "--dir", str(repo), "--into", str(target), "--until", "2026-11-27"
    )
    assert code == 1
    assert err.startswith('error: --until: "2026-11-27" tiene fecha pero no hora')
    assert not target.exists()


def test_restore_and_check_with_no_backup(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    code, _, err = run(capsys, "restore", "--dir", str(repo), "--into", str(tmp_path / "new"))
    assert (code, err) == (1, "error: no finished backup to restore (`backup list`)\n")
    assert not (tmp_path / "new").exists()
    code, out, _ = run(capsys, "check", "--dir", str(repo))
    assert code == 1
    assert f"problem: no finished backup in {repo}/base" in out


def test_a_backup_command_needs_its_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.delenv("LOYALTY_BACKUP_DIR", raising=False)
    code, _, err = run(capsys, "list")
    assert (code, err) == (2, "error: which backup folder? --dir DIR or LOYALTY_BACKUP_DIR\n")
