"""The sale's and the redemption's guarantees of tests/integration/test_credited.py, on the
cluster (all of that module: bodies imported, not copied): a sale or a redemption and its
retry say what it credited; fifty identical sales, fifty identical redemptions at once
credit once and all say what; a test key credits nothing; batches and singles at once
credit each code once. The sale, both redemptions and the ledger rule are functions Citus
runs on the node of the program's shard (migration 0014)."""

from tests.integration.test_credited import (  # noqa: F401 (fixtures and tests collected here)
    callers,
    engine,
    live,
    test_a_code_a_test_key_redeemed_credited_nothing_for_anyone,
    test_a_code_redeemed_in_the_fixture_credited_nothing,
    test_a_live_redemption_answers_a_test_keys_retry_with_what_it_credited,
    test_a_redemption_and_its_retry_carry_what_it_credited,
    test_a_retry_that_waited_for_the_redemption_says_what_it_credited,
    test_a_sale_and_its_retry_carry_what_the_sale_credited,
    test_a_test_keys_sale_credited_nothing_and_says_so,
    test_a_text_repeated_in_a_batch_says_what_its_first_entry_credited,
    test_a_voided_sale_still_says_what_it_credited,
    test_batches_and_singles_at_once_credit_each_code_once_and_all_say_what,
    test_fifty_identical_redemptions_at_once_credit_once_and_all_say_what,
    test_fifty_identical_sales_at_once_credit_once_and_all_say_what,
    test_key,
    test_the_retry_says_what_the_redemption_credited_not_what_the_promotion_gives_now,
    test_the_retry_says_what_the_sale_credited_then_not_what_the_rate_gives_now,
)
