"""tests/integration/test_redemption_columns.py on the cluster (bodies imported): both
forms of a redemption write every column alike, a duplicate writes nothing."""

from tests.integration.test_redemption_columns import (  # noqa: F401 (collected here)
    callers,
    test_a_duplicate_writes_nothing,
    test_a_redemption_writes_every_column,
)
