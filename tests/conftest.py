"""Session-wide real parts: one embedded PostgreSQL for the whole test run.

Each test module that needs a database gets a fresh one (`fresh_database`), so tests
never see each other's rows unless they share a module fixture on purpose.

No test reads or writes the checkout's `.loyalty` (where `./dev up` keeps its data) or any
other folder of the machine: LOYALTY_DATA_DIR points the data dir's default (and with it
the gateway's work dir, DATA_DIR/envoy) at a folder of this session's own, a new one for
each test (`default_data_dir`), for the `loyalty` commands run here and in every child
process (they inherit the environment). A test of the `.loyalty` default itself removes
the variable and runs from an empty folder (tests/unit/test_settings.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from loyalty_grpc.runtime.gateway.tls import (
    TlsFiles,
)
from loyalty_grpc.runtime.postgres import Database, start_embedded
from loyalty_grpc.runtime.settings import GrpcTls, documented_names
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.folios import Folios
from tests.tls_certs import install_pair, make_ca, make_server_cert

_counter = itertools.count()
_tests = itertools.count()

DATA_DIR_VARIABLE = "LOYALTY_DATA_DIR"


@pytest.fixture(scope="session", autouse=True)
def default_data_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder holding every default data dir of this session; the default of the
    session-wide and module-wide fixtures (set up before any test's) is `session` in it."""
    assert DATA_DIR_VARIABLE in documented_names()  # the variable the settings read
    base = tmp_path_factory.mktemp("default-data-dirs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_DIR_VARIABLE, str(base / "session" / ".loyalty"))
        yield base


@pytest.fixture(autouse=True)
def default_data_dir(default_data_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's default data dir: not created, and no other test's."""
    folder = default_data_dirs / f"test-{next(_tests)}" / ".loyalty"
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(folder))
    return folder


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """The embedded PostgreSQL of this test session (its `loyalty` database is unused)."""
    db = start_embedded(tmp_path_factory.mktemp("pg") / "pgdata", delete_on_stop=True)
    yield db
    db.stop()


@pytest.fixture(scope="session")
def create_database(pg_server: Database) -> Callable[[], str]:
    """Factory: a new empty database on the session's server; returns its URL."""

    def create() -> str:
        name = f"t{next(_counter)}"
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return pg_server.url.replace("/loyalty?", f"/{name}?")

    return create


@pytest.fixture(scope="module")
def db_url(create_database: Callable[[], str]) -> str:
    """A fresh database for this test module, migrated to head."""
    from loyalty_grpc.store.migrate import upgrade

    url = create_database()
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url, pool_size=5)
    yield eng
    eng.dispose()


@pytest.fixture(scope="module")
def folios(engine: Engine) -> Folios:
    """The folios of sales made on `engine`, one source for the module as a server process
    holds one (store/folios.py)."""
    return Folios(engine)


@pytest.fixture
def pair(tmp_path: Path) -> TlsFiles:
    """A server certificate and its key, signed by a new CA, as the gateway's HTTPS files."""
    certs = tmp_path / "certs"
    certs.mkdir()
    tls = TlsFiles(cert=certs / "server.pem", key=certs / "server.key")
    install_pair(make_server_cert(make_ca()), tls.cert, tls.key)
    return tls


@pytest.fixture
def grpc_tls(tmp_path: Path) -> GrpcTls:
    """Envoy's client certificate, its key and the CA of the servers (mutual TLS)."""
    folder = tmp_path / "grpc-tls"
    folder.mkdir()
    ca = make_ca("grpc CA")
    tls = GrpcTls(
        cert=folder / "envoy.pem", key=folder / "envoy.key", ca=ca.write(folder / "ca.pem")
    )
    install_pair(make_server_cert(ca, client=True), tls.cert, tls.key)
    return tls


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder so `-m "not e2e"` (or `"not reliability"`, `"not citus"`) works."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        if "reliability" in parts:
            item.add_marker(pytest.mark.reliability)
        if "citus" in parts:
            item.add_marker(pytest.mark.citus)
