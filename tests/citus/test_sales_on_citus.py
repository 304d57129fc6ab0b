"""The sale's guarantees of tests/integration/test_credited.py, on the cluster (their
bodies imported, not copied): a sale and its retry say what it credited; fifty identical
sales at once credit once and all say what; a test key's sale credits nothing."""

from tests.integration.test_credited import (  # noqa: F401 (fixtures and tests collected here)
    callers,
    engine,
    live,
    test_a_sale_and_its_retry_carry_what_the_sale_credited,
    test_a_test_keys_sale_credited_nothing_and_says_so,
    test_a_voided_sale_still_says_what_it_credited,
    test_fifty_identical_sales_at_once_credit_once_and_all_say_what,
    test_key,
    test_the_retry_says_what_the_sale_credited_then_not_what_the_rate_gives_now,
)
