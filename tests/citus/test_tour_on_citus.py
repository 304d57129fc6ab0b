"""`loyalty up --demo` on the cluster, end to end through Envoy: the README's tour and the
full one of docs/tour.md (tests/e2e/test_readme_tour.py, its test imported, not copied),
each against a fresh database on the Citus coordinator (`LOYALTY_DATABASE_URL`), which
`loyalty up` migrates, hence distributes, before loading the demo. Every answer the tours
show is the service's on Citus too: ping, the fan in every form, sales, redemptions, the
promotions, codes and the roster feed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.citus.cluster import Cluster
from tests.e2e.processes import READY_LINE, Running, demo_up_args, loyalty_env
from tests.e2e.test_readme_tour import (  # noqa: F401 (collected here, on the cluster)
    ROOT,
    test_every_answer_the_tour_shows_is_the_services,
)
from tests.support import free_port

pytestmark = pytest.mark.e2e

_databases = itertools.count()


@pytest.fixture
def demo_address(citus_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh `loyalty up --demo` on a fresh database of the cluster for each tour."""
    name = f"tour{next(_databases)}"
    url = citus_cluster.create_database(name)
    data_dir = tmp_path_factory.mktemp("tour")
    http_port = free_port()
    up = Running(demo_up_args(data_dir, http_port), ROOT, loyalty_env(LOYALTY_DATABASE_URL=url))
    try:
        up.wait_for(READY_LINE)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        assert up.stop() == 0, "\n".join(up.lines)
        citus_cluster.drop_database(name)
