"""Which schemas this code runs on (store/migrate.py `Schema`, docs/deployment.md
"Upgrades"): `loyalty serve` refuses one older than its head with one line and starts
nothing, runs on one a later version migrated (a revision it does not know) with a
warning; `loyalty wallet send` and `upgrade` apply the same rule. Real PostgreSQL, real
`loyalty serve` processes."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from loyalty_grpc.runtime.cli import main
from loyalty_grpc.store import migrate
from loyalty_grpc.store.migrate import Schema, SchemaState
from tests.e2e.processes import LOYALTY, Running, loyalty_env, serve_args
from tests.support import ADMIN_TOKEN, free_port

HEAD = migrate.head()
NEEDED = migrate.needed()  # head, less the contract revisions at its top
FUTURE = "0999_from_a_later_version"
TOKEN = ADMIN_TOKEN


def _set_revision(url: str, revision: str) -> None:
    """As if a later version had migrated the database to `revision`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (revision,))


def _serve_env(url: str, **extra: str) -> dict[str, str]:
    env = loyalty_env(LOYALTY_DATABASE_URL=url, LOYALTY_ADMIN_TOKEN=TOKEN)
    env.pop("LOYALTY_PROG", None)  # as run outside ./dev, unless `extra` sets it
    return {**env, **extra}


def _serve_refused(url: str, data_dir: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    done = subprocess.run(
        [*LOYALTY, *serve_args(port, 1, "--data-dir", str(data_dir))],
        env=_serve_env(url, **extra),
        cwd=data_dir.parent,
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    # Nothing started: no line but the error, no /metrics files, no processes file (both
    # written before the first worker starts), and the port free.
    assert done.stdout == ""
    assert not data_dir.exists() or list(data_dir.iterdir()) == []
    with socket.create_server(("127.0.0.1", port)):
        pass
    return done


# --- the rule -------------------------------------------------------------------------------


def test_the_rule() -> None:
    assert Schema.of(HEAD) == Schema(HEAD, HEAD, SchemaState.CURRENT)
    assert Schema.of(None).state is SchemaState.BEHIND
    assert Schema.of("0001").state is SchemaState.BEHIND
    assert Schema.of(FUTURE).state is SchemaState.NEWER
    assert Schema.of(NEEDED).state is (
        SchemaState.CURRENT if NEEDED == HEAD else SchemaState.CONTRACT_PENDING
    )
    assert [Schema.of(r).usable for r in (HEAD, NEEDED, None, "0001", FUTURE)] == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert Schema.of("0004").refusal("loyalty migrate") == (
        f"the database schema is at revision 0004, older than this version needs ({NEEDED}): "
        "run `loyalty migrate` first"
    )
    assert Schema.of(None).refusal("./dev migrate") == (
        f"the database is not migrated (no revision applied; this version needs {NEEDED}): "
        "run `./dev migrate` first"
    )


# --- loyalty serve --------------------------------------------------------------------------


def test_serve_refuses_an_unmigrated_database(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    done = _serve_refused(create_database(), tmp_path / "data")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: the database is not migrated (no revision applied; this version needs "
        f"{NEEDED}): run `loyalty migrate` first\n"
    )


def test_serve_refuses_a_half_migrated_database(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    url = create_database()
    migrate.upgrade(url, "0004")
    done = _serve_refused(url, tmp_path / "data", LOYALTY_PROG="./dev")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: the database schema is at revision 0004, older than this version needs "
        f"({NEEDED}): run `./dev migrate` first\n"
    )


def test_serve_refuses_an_unreachable_database_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://loyalty@127.0.0.1:{free_port()}/loyalty"
    done = _serve_refused(url, tmp_path / "data")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "error: cannot read the database's schema revision: OperationalError: connection "
    )


def test_serve_runs_on_a_schema_a_later_version_migrated(
    create_database: Callable[[], str], tmp_path: Path
) -> None:
    url = create_database()
    migrate.upgrade(url)
    _set_revision(url, FUTURE)
    port = free_port()
    serve = Running(
        serve_args(port, 1, "--data-dir", str(tmp_path / "data")),
        tmp_path,
        _serve_env(url),
    )
    try:
        serve.wait_for(f"gRPC: 127.0.0.1:{port}", timeout=60)
        serve.wait_for_workers(1)
    finally:
        code = serve.stop(signal.SIGTERM)
    assert code == 0, "\n".join(serve.lines)
    warnings = [
        json.loads(line)
        for line in serve.lines
        if line.startswith("{") and json.loads(line)["level"] == "WARNING"
    ]
    assert [w["msg"] for w in warnings if "schema" in w["msg"]] == [
        Schema.of(FUTURE).newer_warning()
    ]
    assert f"revision {FUTURE}, newer than this version knows (its head is {HEAD})" in (
        Schema.of(FUTURE).newer_warning()
    )


# --- the same rule elsewhere ----------------------------------------------------------------


def test_upgrade_leaves_a_newer_schema_alone(
    create_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    """`loyalty up` and `loyalty migrate` of the previous version (a rollback) start on the
    schema the next one left instead of failing on a revision they cannot find."""
    url = create_database()
    migrate.upgrade(url)
    _set_revision(url, FUTURE)
    with caplog.at_level(logging.WARNING, logger="loyalty_grpc.store.migrate"):
        migrate.upgrade(url)
    assert migrate.current(url) == FUTURE
    assert [r.getMessage() for r in caplog.records] == [Schema.of(FUTURE).newer_warning()]


def test_wallet_send_applies_the_same_rule(
    create_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = create_database()
    migrate.upgrade(url, "0006")
    monkeypatch.setenv("LOYALTY_DATABASE_URL", url)
    monkeypatch.delenv("LOYALTY_WALLET_PROVIDER", raising=False)
    monkeypatch.delenv("LOYALTY_PROG", raising=False)
    assert main(["wallet", "send"]) == 2
    assert capsys.readouterr().err == (
        f"error: the database schema is at revision 0006, older than this version needs "
        f"({NEEDED}): run `loyalty migrate` first\n"
    )
    migrate.upgrade(url)
    _set_revision(url, FUTURE)
    with caplog.at_level(logging.WARNING, logger="loyalty_grpc.runtime.schema"):
        assert main(["wallet", "send"]) == 0
    assert "wallet (local): 0 delivered" in capsys.readouterr().out
    assert Schema.of(FUTURE).newer_warning() in caplog.messages


def test_status_reports_a_newer_schema_as_usable(create_database: Callable[[], str]) -> None:
    from loyalty_grpc.runtime.cli.status import database_lines
    from loyalty_grpc.store.db import make_engine

    url = create_database()
    migrate.upgrade(url)
    _set_revision(url, FUTURE)
    engine = make_engine(url, pool_size=1)
    try:
        lines = {line.name: line for line in database_lines(engine, url)}
    finally:
        engine.dispose()
    assert lines["migrations"].value == f"{FUTURE} applied, newer than this version's head {HEAD}"
    assert all(line.ok for line in lines.values())
    assert {"wallet outbox", "ledger"} <= lines.keys()  # read as on the head schema
