"""The support desk's points operations of tests/integration/test_points_admin.py on the
cluster, all of them, bodies imported: the ledger with its running balance, adjustments,
voids once under concurrency, every failure changing nothing, the ledger summing to the
balance. The ledger's order across a shard move: test_ledger_on_citus.py."""

from tests.integration.test_points_admin import (  # noqa: F401 (fixtures and tests collected here)
    clave,
    test_adjust_a_fan_in_baja,
    test_adjust_credit_then_debit,
    test_adjust_refusals_change_nothing,
    test_concurrent_debits_never_go_below_zero,
    test_concurrent_voids_reverse_once,
    test_ledger_errors,
    test_ledger_of_a_fan_without_entries_and_of_a_fan_in_baja,
    test_ledger_oldest_first_with_running_balance_and_details,
    test_ledger_sums_to_the_balance_after_everything,
    test_void_after_the_points_were_spent_goes_negative,
    test_void_errors_change_nothing,
    test_void_of_a_fan_in_baja,
    test_void_of_a_test_sale_writes_no_ledger_entry,
    test_void_reverses_once_and_keeps_the_sale,
)
