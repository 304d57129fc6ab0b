"""Which schemas this code runs on (tests/integration/test_schema_check.py, all of it) and
the migrations' schema (test_migrations.py), on the cluster, bodies imported; each
database from tests/citus/conftest.py's `create_database` (distributed when migrated).
Not from test_migrations: the downgrade paths (test_downgrade_to_base_and_back,
test_wallet_data_survives_0007_both_ways: Citus keeps no downgrade, docs/citus.md);
test_sequences_and_trigger_exist (the coordinator's catalogue also lists Citus's own
sequences; the trigger on every shard is test_schema.py's); test_insert_is_stamped_by_the_
trigger (it compares with the coordinator's transaction id, the stamp is the worker's:
test_roster.py proves the stamp on the cluster)."""

from tests.integration.test_migrations import (  # noqa: F401 (fixtures and tests collected here)
    eng,
    fan_pk,
    migrated_url,
    test_autogenerate_sees_no_difference,
    test_catalogue_matches_create_all,
    test_current_is_head,
    test_estado_change_bumps_the_stamp,
    test_other_or_no_change_keeps_the_stamp,
    test_roster_field_change_bumps_the_stamp,
    test_upgrade_twice_is_a_noop,
)
from tests.integration.test_schema_check import (  # noqa: F401 (fixtures and tests collected here)
    test_serve_refuses_a_half_migrated_database,
    test_serve_refuses_an_unmigrated_database,
    test_serve_refuses_an_unreachable_database_in_one_line,
    test_serve_runs_on_a_schema_a_later_version_migrated,
    test_status_reports_a_newer_schema_as_usable,
    test_the_rule,
    test_upgrade_leaves_a_newer_schema_alone,
    test_wallet_send_applies_the_same_rule,
)
