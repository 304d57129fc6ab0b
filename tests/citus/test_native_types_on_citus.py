"""The typed fields for native gRPC callers (tests/integration/test_native_types.py) on the
cluster, all of them, bodies imported, over a real channel with the demo data."""

from tests.integration.conftest import (  # noqa: F401 (fixtures collected here)
    channel,
    server,
    server_settings,
)
from tests.integration.test_native_types import (  # noqa: F401 (fixtures and tests collected here)
    stub,
    test_batch_redeem_fills_typed_results_for_native_callers_only,
    test_deposit_codes_with_typed_fields,
    test_every_native_field_names_a_json_field_of_its_message,
    test_redeem_ts_utc,
    test_resolve_fills_promo_detalle_for_native_callers_only,
    test_roster_with_typed_fields,
    test_sale_with_typed_fields,
    test_ts_utc_more_than_a_day_ahead_is_refused,
    test_typed_sale_fields_follow_the_json_rules,
    test_zero_cents_is_an_amount_and_unset_is_not_sent,
)
