"""`loyalty backup …`: take, check, list, restore and prune base backups and the WAL
archive (runtime/backup/; docs/backups.md). The backup folder is --dir, else
LOYALTY_BACKUP_DIR. A refusal prints `error: …` and exits with 1, having changed nothing."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from loyalty_grpc.domain.timestamps import format_iso_utc
from loyalty_grpc.runtime.backup.repository import BackupError, Repository
from loyalty_grpc.runtime.backup.wal import archiving_lines
from loyalty_grpc.runtime.console import command, say
from loyalty_grpc.runtime.settings import EXIT_CONFIG, Settings


def add_backup_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="backup_command", required=True)
    take = sub.add_parser(
        "take",
        help="a base backup (pg_basebackup) into DIR/base/; refused unless the server "
        "archives its WAL into DIR/wal",
    )
    _dir_flag(take)
    take.add_argument(
        "--data-dir", metavar="DIR", help="the embedded PostgreSQL's (no LOYALTY_DATABASE_URL)"
    )
    _dir_flag(
        sub.add_parser(
            "check",
            help="verify every backup (pg_verifybackup) and the archive's continuity; "
            "exit 1 on any problem",
        )
    )
    _dir_flag(sub.add_parser("list", help="the backups and the archive's span"))
    restore = sub.add_parser(
        "restore",
        help="a backup into a new, empty data directory, set to replay the archive to "
        "--until (else to its end) and promote",
    )
    _dir_flag(restore)
    restore.add_argument(
        "--into", type=Path, required=True, metavar="NEW_PGDATA", help="new or empty folder"
    )
    restore.add_argument(
        "--until",
        metavar="TIMESTAMP",
        help='the last moment to restore, as the service reads timestamps ("2026-11-27T'
        '15:16:52-06:00", "2026-11-27 21:16:52" UTC, epoch seconds); the server\'s clock',
    )
    prune = sub.add_parser(
        "prune", help="delete all but the newest --keep backups and the WAL they do not need"
    )
    _dir_flag(prune)
    prune.add_argument("--keep", type=int, required=True, metavar="N", help="backups to keep")
    _dir_flag(
        sub.add_parser(
            "archive-settings",
            help="the postgresql.conf lines that archive an external PostgreSQL's WAL into DIR/wal",
        )
    )


def _dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        dest="backup_dir",
        metavar="DIR",
        help="the backup folder (env LOYALTY_BACKUP_DIR)",
    )


def backup_command(args: argparse.Namespace, settings: Settings) -> int:
    if settings.backup_dir is None:
        sys.stderr.write("error: which backup folder? --dir DIR or LOYALTY_BACKUP_DIR\n")
        return EXIT_CONFIG
    repo = Repository(settings.backup_dir.resolve())
    try:
        return _run(args.backup_command, args, settings, repo)
    except BackupError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1


def _run(name: str, args: argparse.Namespace, settings: Settings, repo: Repository) -> int:
    if name == "take":
        return _take(settings, repo)
    if name == "check":
        return _check(repo)
    if name == "list":
        return _list(repo)
    if name == "restore":
        return _restore(args, repo)
    if name == "prune":
        from loyalty_grpc.runtime.backup.prune import prune

        pruned = prune(repo, args.keep)
        say(
            f"deleted {len(pruned.deleted)} backups {', '.join(pruned.deleted) or ''}; "
            f"kept from {pruned.oldest_kept.name}; archive kept from {pruned.wal_before}"
        )
        return 0
    for line in archiving_lines(repo.wal):
        say(line)
    return 0


def _take(settings: Settings, repo: Repository) -> int:
    from loyalty_grpc.runtime.backup.take import take
    from loyalty_grpc.runtime.postgres import open_database

    db = open_database(settings.data_dir, settings.database_url)
    try:
        backup = take(repo, db.url)
    finally:
        db.stop()
    say(
        f"backup {backup.name} taken into {repo.folder(backup.name)}: started "
        f"{format_iso_utc(backup.started)}, restorable from {format_iso_utc(backup.ended)} "
        f"on (WAL {backup.start_lsn} to {backup.end_lsn}, timeline {backup.timeline})"
    )
    return 0


def _check(repo: Repository) -> int:
    from loyalty_grpc.runtime.backup.check import check

    checked = check(repo)
    for problem in checked.problems:
        say(f"problem: {problem}")
    spans = "; ".join(f"{low} to {high}" for low, high in checked.spans) or "none"
    verdict = "NOT restorable as it stands" if checked.problems else "ok"
    say(
        f"{verdict}: {checked.backups} backups verified, {checked.segments} archived "
        f"segments checked ({spans}), {len(checked.problems)} problems"
    )
    return 1 if checked.problems else 0


def _list(repo: Repository) -> int:
    from loyalty_grpc.runtime.backup.repository import segment_bytes_of

    repo.require()
    backups = repo.backups()
    for backup in backups:
        say(
            f"{backup.name}  started {format_iso_utc(backup.started)}  restorable from "
            f"{format_iso_utc(backup.ended)}  timeline {backup.timeline}"
        )
    for name in repo.unfinished():
        say(f"{name}  unfinished (no record): delete it")
    segments = sorted(repo.segments(segment_bytes_of(backups)))
    if segments:
        size = segment_bytes_of(backups)
        newest = max((repo.wal / s.name(size)).stat().st_mtime for s in segments[-3:])
        say(
            f"archive: {len(segments)} segments, {segments[0].name(size)} to "
            f"{segments[-1].name(size)}, the newest archived "
            f"{format_iso_utc(datetime.fromtimestamp(newest, UTC))}"
        )
    else:
        say(f"archive: empty ({repo.wal})")
    return 0


def _restore(args: argparse.Namespace, repo: Repository) -> int:
    from loyalty_grpc.runtime.backup.restore import parse_until, restore

    until = parse_until(args.until) if args.until is not None else None
    done = restore(repo, args.into.resolve(), until)
    target = f"to {format_iso_utc(until)}" if until is not None else "to the archive's end"
    say(
        f"backup {done.backup.name} restored into {done.into}, set to replay the archive "
        f"{target} and promote. Next: start PostgreSQL on it (an external server: pg_ctl "
        f"-D {done.into} start or its unit; the embedded one: `{command('up')}` with it as "
        "DATA_DIR/pgdata), wait until `SELECT pg_is_in_recovery()` is false, start the "
        f"service on it, then `{command('backup take')}` (docs/backups.md)"
    )
    return 0
