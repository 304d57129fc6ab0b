"""The Citus tests' real parts: one cluster (a coordinator and two workers, tests/citus/
cluster.py) for the session, a fresh database on it for each test module.

Citus is built from `../shared/vendor` into the wheel's PostgreSQL first (about 30 s, once
per install). Where that folder or a C compiler is missing the tests are skipped, saying
why, unless LOYALTY_REQUIRE_CITUS=1 (CI: .ci/run), which fails them instead."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.citus.cluster import Cluster, build_citus, running_cluster, why_no_citus

# tests/e2e's stack (a gRPC server, the wallet sender and Envoy in front of a migrated
# database with a fixture applied), its client and a migrated database of its own for
# `serve`/`up` processes: the same fixtures, on `create_database` below, hence on the
# cluster; the modules of tests/e2e imported into tests/citus take them.
from tests.e2e.conftest import http, migrated_database, stack  # noqa: F401

REQUIRE_VARIABLE = "LOYALTY_REQUIRE_CITUS"

_databases = itertools.count()


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's cluster, on Citus built into the wheel's PostgreSQL; stopped at the
    end of the session, failed tests or not."""
    reason = why_no_citus()
    if reason is not None:
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 and Citus cannot be built: {reason}")
        pytest.skip(reason)
    build_citus()
    with running_cluster(tmp_path_factory.mktemp("citus")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def citus_url(citus_cluster: Cluster) -> Iterator[str]:
    """A fresh database on the cluster for this test module (the three nodes, Citus in
    each, the workers added): the coordinator's URL. Dropped after the module."""
    name = f"citus{next(_databases)}"
    url = citus_cluster.create_database(name)
    yield url
    citus_cluster.drop_database(name)


@pytest.fixture(scope="session")
def create_database(citus_cluster: Cluster) -> Callable[[], str]:
    """tests/conftest.py's `create_database` on the cluster: a new empty database on the
    three nodes, Citus in each, the workers added (not migrated: `loyalty migrate` on it
    distributes); the coordinator's URL. Dropped with the cluster at the session's end."""

    def create() -> str:
        return citus_cluster.create_database(f"citus{next(_databases)}")

    return create


@pytest.fixture(scope="module")
def db_url(citus_url: str) -> str:
    """tests/conftest.py's `db_url` on the cluster: a fresh database migrated by `loyalty
    migrate`'s path, hence distributed. A test of tests/integration imported into a module
    of tests/citus (with the fixtures it takes) runs its guarantee on Citus, its body
    written once."""
    from loyalty_grpc.store.migrate import upgrade

    upgrade(citus_url)
    return citus_url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each module of tests/citus runs its tests in the order they are written in the
    module they come from, not in the order their names are imported (alphabetical): a
    module's later tests may count on its earlier ones' rows (tests/e2e's modules share
    one stack, each module its own program). Modules keep their places."""
    here = Path(__file__).parent
    positions = {id(item): n for n, item in enumerate(items)}
    first: dict[Path, int] = {}
    for n, item in enumerate(items):
        first.setdefault(item.path, n)

    def written(item: pytest.Item) -> tuple[int, str, int, int]:
        code = getattr(getattr(item, "function", None), "__code__", None)
        if item.path.parent != here or code is None:
            return (first[item.path], "", 0, positions[id(item)])
        return (first[item.path], code.co_filename, code.co_firstlineno, positions[id(item)])

    items.sort(key=written)
