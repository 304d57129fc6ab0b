"""tests/e2e/test_cli.py on the cluster: `loyalty migrate` then `loyalty serve` against a
distributed database, serving and stopping gracefully on SIGTERM (the test imported, not
copied; `create_database` is the cluster's, tests/citus/conftest.py).

Left out, no database of the cluster in them: `up --demo` (its own embedded database;
`up --demo` on the coordinator is tests/citus/test_tour_on_citus.py), `serve` without a
database URL, `gateway check`, `gateway run` and the wheel's contents."""

import pytest

from tests.e2e.test_cli import (  # noqa: F401 (tests collected here)
    test_migrate_then_serve_stops_gracefully_on_sigterm,
)

pytestmark = pytest.mark.e2e
