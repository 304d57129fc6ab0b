"""Wallet pass: each balance change reaches the fan's wallet pass silently, and no sale
waits for it (DESIGN.md §2 "Wallet pass").

- `store.ledger.move_points` appends (fan, new balance) to `wallet_outbox` in the
  transaction of the change;
- `outbox.send_pending` folds outbox rows into each fan's `wallet_pases` row and delivers
  the latest balance of due fans to a provider, with leases, coalescing and back-off, at a
  cost bounded by its batches; `outbox.drain` runs it until nothing is due;
  `sender.WalletSender` runs it in the server process;
- `backlog`: how far behind the sender is (`loyalty status`, /metrics), bounded reads;
- `providers`: the `WalletProvider` protocol (per fan, or `BatchWalletProvider`) and
  `LocalProvider` (the default: records deliveries in `wallet_entregas`, a batch per
  INSERT); `google.GoogleWalletProvider` patches Google Wallet loyalty objects without a
  notification;
- `config.WalletSettings.from_env()` reads the `LOYALTY_WALLET_*` variables.

Every statement they run is in `store/wallet.py`.
"""

from loyalty_grpc.wallet.backlog import Backlog, backlog, pending_fans
from loyalty_grpc.wallet.config import WalletConfigError, WalletSettings
from loyalty_grpc.wallet.google import GoogleWalletProvider, object_suffix
from loyalty_grpc.wallet.outbox import SendReport, backoff, drain, send_pending
from loyalty_grpc.wallet.providers import (
    BatchWalletProvider,
    Delivery,
    FanPass,
    LocalProvider,
    WalletDeliveryError,
    WalletProvider,
)
from loyalty_grpc.wallet.sender import WalletSender

__all__ = [
    "Backlog",
    "BatchWalletProvider",
    "Delivery",
    "FanPass",
    "GoogleWalletProvider",
    "LocalProvider",
    "SendReport",
    "WalletConfigError",
    "WalletDeliveryError",
    "WalletProvider",
    "WalletSender",
    "WalletSettings",
    "backlog",
    "backoff",
    "drain",
    "object_suffix",
    "pending_fans",
    "send_pending",
]
