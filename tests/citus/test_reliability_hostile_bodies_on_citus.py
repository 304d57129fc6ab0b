"""tests/reliability/test_hostile_bodies.py on the cluster: hostile bodies against every POST
endpoint (look-alike digits, LIKE wildcards, SQL text, NUL escapes, numbers beyond any
range, wrong JSON types), each with otherwise valid fields, answered without a 5xx, in the
envelope, and nothing written on the distributed database. Imported, not copied."""

from tests.reliability.conftest import stack  # noqa: F401 (fixture)
from tests.reliability.test_hostile_bodies import (  # noqa: F401 (collected here)
    client,
    test_case_names_are_unique,
    test_hostile_body,
)
