"""LOYALTY_DATABASE_PASSWORD_FILE (issue 24 §5): the database password from a file (a
systemd credential, a compose secret) instead of inside LOYALTY_DATABASE_URL in a plain
environment file. Against the session's real PostgreSQL with a role that must log in with
its password (scram-sha-256 for that role only): the file's password is what connects, for
the settings and for `loyalty migrate`; it never appears in an error or the output."""

from __future__ import annotations

import itertools
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from loyalty_grpc.runtime.postgres import Database
from loyalty_grpc.runtime.settings import ConfigError, Settings, with_password_file
from loyalty_grpc.store.db import make_engine, parse_url

_roles = itertools.count()


@dataclass(frozen=True)
class Role:
    name: str
    password: str
    url: str  # without the password


@pytest.fixture(scope="module")
def role(pg_server: Database) -> Iterator[Role]:
    """A role owning its database, that logs in (over the server's Unix socket) only with
    its password: a line for it alone first in pg_hba.conf (the others stay trusted)."""
    name = f"pwrole{next(_roles)}"
    # Characters a URL must escape, a space, a quote: the file holds it as it is.
    password = f"p@ss w:rd/%?#'{secrets.token_urlsafe(12)}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
            )
        )
        conn.execute(
            psycopg.sql.SQL("CREATE DATABASE {} OWNER {}").format(
                psycopg.sql.Identifier(name), psycopg.sql.Identifier(name)
            )
        )
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        original = hba.read_text(encoding="utf-8")
        hba.write_text(f"local {name} {name} scram-sha-256\n{original}", encoding="utf-8")
        conn.execute("SELECT pg_reload_conf()")
    base = parse_url(pg_server.url)
    url = base.set(username=name, password=None, database=name).render_as_string(
        hide_password=False
    )
    try:
        yield Role(name, password, url)
    finally:
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            hba.write_text(original, encoding="utf-8")
            conn.execute("SELECT pg_reload_conf()")


def _file(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "database_password"
    path.unlink(missing_ok=True)
    path.write_text(content, encoding="utf-8")
    path.chmod(0o400)
    return path


def _current_user(url: str) -> str:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SELECT current_user")).scalar_one())
    finally:
        engine.dispose()


def test_the_file_holds_the_password_that_connects(role: Role, tmp_path: Path):
    env = {
        "LOYALTY_DATABASE_URL": role.url,
        "LOYALTY_DATABASE_PASSWORD_FILE": str(_file(tmp_path, role.password + "\n")),
    }
    settings = Settings.from_env(env)
    assert settings.database_url is not None
    assert _current_user(settings.database_url) == role.name
    assert role.password not in repr(settings)


def test_without_it_or_with_another_password_nothing_connects(role: Role, tmp_path: Path):
    """The role's pg_hba line is in force: the file's password is what let it in."""
    with pytest.raises(Exception, match="password") as missing:
        _current_user(role.url)
    wrong = Settings.from_env(
        {
            "LOYALTY_DATABASE_URL": role.url,
            "LOYALTY_DATABASE_PASSWORD_FILE": str(_file(tmp_path, "not-the-password")),
        }
    )
    assert wrong.database_url is not None
    with pytest.raises(Exception, match="password authentication failed") as refused:
        _current_user(wrong.database_url)
    for error in (missing, refused):
        assert "not-the-password" not in str(error.value)


def test_migrate_reads_the_password_from_the_file(role: Role, tmp_path: Path):
    env = {
        "PATH": "/usr/bin:/bin",
        "LOYALTY_DATA_DIR": str(tmp_path / "data"),
        "LOYALTY_DATABASE_URL": role.url,
        "LOYALTY_DATABASE_PASSWORD_FILE": str(_file(tmp_path, role.password)),
    }
    done = subprocess.run(
        [sys.executable, "-m", "loyalty_grpc.runtime.cli", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert role.password not in done.stdout + done.stderr
    engine = make_engine(with_password_file(role.url, _file(tmp_path, role.password)))
    try:
        with engine.connect() as conn:
            applied = conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()
    assert applied == 1


def test_what_is_refused_says_why_and_never_the_password(tmp_path: Path):
    url = "postgresql://loyalty@db.internal:5432/loyalty?sslmode=verify-full"
    secret = "s3cret-never-shown"
    with pytest.raises(ConfigError, match="needs LOYALTY_DATABASE_URL"):
        with_password_file(None, _file(tmp_path, secret))
    with pytest.raises(ConfigError, match="holds a password and LOYALTY_DATABASE_PASSWORD_FILE"):
        with_password_file(
            url.replace("loyalty@", "loyalty:other@"), tmp_path / "database_password"
        )
    with pytest.raises(ConfigError, match=r"cannot read .*missing: No such file"):
        with_password_file(url, tmp_path / "missing")
    for content in ("", "\n", f"{secret}\nsecond line\n"):
        path = _file(tmp_path, content)
        with pytest.raises(ConfigError, match="must hold the password on one line") as refused:
            with_password_file(url, path)
        assert secret not in str(refused.value)
    # Multi-host URLs (High availability) get it too, and keep their parameters.
    with_file = with_password_file(
        "postgresql://loyalty@db1:5432,db2:5432/loyalty?target_session_attrs=read-write",
        _file(tmp_path, secret + "\r\n"),
    )
    parsed = parse_url(with_file)
    assert parsed.password == secret
    assert parsed.query["host"] == ("db1:5432", "db2:5432")
    assert parsed.query["target_session_attrs"] == "read-write"
