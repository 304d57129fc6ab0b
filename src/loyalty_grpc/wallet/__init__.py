"""Wallet pass: each balance change reaches the fan's wallet pass silently, and no sale
waits for it (DESIGN.md §2 "Wallet pass").

- `store.ledger.move_points` appends (fan, new balance) to `wallet_outbox` in the
  transaction of the change;
- `outbox.send_pending` delivers the latest balance per due fan to a provider, with
  leases, coalescing and back-off; `sender.WalletSender` runs it in the server process;
- `providers`: the `WalletProvider` protocol and `LocalProvider` (the default: records
  deliveries in `wallet_entregas`); `google.GoogleWalletProvider` patches Google Wallet
  loyalty objects without a notification;
- `config.WalletSettings.from_env()` reads the `LOYALTY_WALLET_*` variables.
"""

from loyalty_grpc.wallet.config import WalletConfigError, WalletSettings
from loyalty_grpc.wallet.google import GoogleWalletProvider, object_suffix
from loyalty_grpc.wallet.outbox import SendReport, backoff, pending_fans, send_pending
from loyalty_grpc.wallet.providers import (
    FanPass,
    LocalProvider,
    WalletDeliveryError,
    WalletProvider,
)
from loyalty_grpc.wallet.sender import WalletSender

__all__ = [
    "FanPass",
    "GoogleWalletProvider",
    "LocalProvider",
    "SendReport",
    "WalletConfigError",
    "WalletDeliveryError",
    "WalletProvider",
    "WalletSender",
    "WalletSettings",
    "backoff",
    "object_suffix",
    "pending_fans",
    "send_pending",
]
