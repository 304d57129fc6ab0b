"""LOYALTY_BACKUP_DIR with `loyalty up`'s embedded PostgreSQL: `up` turns WAL archiving on
(restarting the server it just started), and `loyalty backup take` / `check` / `list`
work on it as they do on an external server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.processes import LOYALTY, READY_LINE, Running, demo_up_args, loyalty_env
from tests.support import free_port


def backup(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOYALTY, "backup", *args], env=env, text=True, capture_output=True, timeout=180,
        check=False,
    )  # fmt: skip


def test_up_archives_the_embedded_postgresql_s_wal_into_the_backup_folder(tmp_path: Path):
    data_dir, backups = tmp_path / "data", tmp_path / "backups"
    env = loyalty_env(LOYALTY_BACKUP_DIR=str(backups))
    up = Running(demo_up_args(data_dir, free_port(), "--workers", "1"), tmp_path, env)
    try:
        up.wait_for(READY_LINE)
        assert any("restarting the embedded PostgreSQL" in line for line in up.lines)
        taken = backup("take", "--data-dir", str(data_dir), env=env)
        assert taken.returncode == 0, taken.stdout + taken.stderr
        checked = backup("check", env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.startswith("ok: 1 backups verified"), checked.stdout
        listed = backup("list", env=env)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert len(lines) == 2, listed.stdout
        assert "restorable from" in lines[0], listed.stdout
        assert lines[1].startswith("archive: "), listed.stdout
    finally:
        code = up.stop()
    assert code == 0, "\n".join(up.lines[-30:])
