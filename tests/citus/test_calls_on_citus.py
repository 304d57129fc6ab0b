"""tests/integration/test_look_alikes.py and test_by_program.py on the cluster, bodies
imported: look-alike letters never reach another fan or code; two programs with the same
Fan IDs and code texts never see each other's rows; the folio; this version on the expand
revision. Not test_every_hot_statement_reads_each_program_table_by_its_program: it reads
PostgreSQL's plans, which on the coordinator are Citus's; its guarantee on the cluster
(every hot call on one shard) is test_single_shard.py's and test_hot_calls_delegated.py's."""

from tests.integration.test_by_program import (  # noqa: F401 (fixtures and tests collected here)
    test_a_duplicate_sale_leaves_a_gap_never_a_repeat,
    test_folios_taken_at_once_by_many_threads_and_processes_never_repeat,
    test_the_folio_stays_an_int32_json_number,
    test_this_version_works_on_the_expand_revision_and_its_rows_pass_the_contract,
    world,
)
from tests.integration.test_look_alikes import (  # noqa: F401 (fixtures and tests collected here)
    program,
    test_a_text_value_that_is_not_ascii_is_not_found_without_a_query,
    test_an_email_equal_but_for_ascii_case_is_a_duplicate,
    test_emails_compare_folding_only_ascii_letters,
    test_fixtures_refuse_identifiers_that_are_not_ascii,
    test_the_databases_lower_folds_the_kelvin_sign_and_collate_c_does_not,
    test_the_email_lookup_is_an_index_lookup,
    test_the_unique_index_folds_only_ascii,
)
