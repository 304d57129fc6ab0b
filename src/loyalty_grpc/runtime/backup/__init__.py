"""Backups and point-in-time recovery with PostgreSQL's own tools (docs/backups.md):
continuous WAL archiving (`wal.archive_command`), base backups (`pg_basebackup`), their
check (`pg_verifybackup` and the archive's continuity), restore into a new data directory
(`recovery.signal`, `restore_command`, `recovery_target_time`) and retention
(`pg_archivecleanup`). `loyalty backup ...` runs them (cli/backup.py)."""
