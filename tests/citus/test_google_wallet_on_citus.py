"""The Google Wallet provider of tests/integration/test_google_wallet.py on the cluster,
all of it, bodies imported: the sender delivers the latest balance from the distributed
outbox to a local stand-in for Google."""

from tests.integration.test_google_wallet import (  # noqa: F401 (fixtures and tests collected here)
    google,
    key_file,
    key_info,
    private_key,
    provider,
    test_a_401_gets_one_fresh_token,
    test_a_balance_beyond_32_bits_is_permanent_and_not_sent,
    test_a_delivery_is_a_silent_patch_with_a_service_account_token,
    test_a_token_close_to_expiry_is_replaced,
    test_an_unreachable_api_is_retryable,
    test_bad_configuration_is_one_clear_line,
    test_google_settings_from_the_environment,
    test_no_pass_is_permanent,
    test_object_ids_use_only_allowed_characters_and_are_one_to_one,
    test_retry_after_is_passed_on,
    test_server_errors_are_retryable,
    test_settings_are_read_at_start,
    test_the_default_is_the_local_provider,
    test_the_sender_delivers_the_latest_balance_to_google,
    test_the_token_is_reused_across_deliveries,
)
