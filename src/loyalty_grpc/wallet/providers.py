"""What a wallet provider is, and the default one (local: records each delivery)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from loyalty_grpc.store import wallet as wallet_store
from loyalty_grpc.store.db import Database


@dataclass(frozen=True)
class FanPass:
    """Whose pass to refresh. `programa_id` and `fan_id` (canonical) name the pass at the
    provider; `fan_pk` is our row."""

    fan_pk: int
    programa_id: str
    fan_id: str


@dataclass(frozen=True)
class Delivery:
    """One balance for one pass."""

    fan: FanPass
    saldo: int


class WalletDeliveryError(Exception):
    """A delivery failed. `permanent`: retrying the same balance cannot help (e.g. the fan
    has no pass); the sender drops it and tries again only on the fan's next balance
    change. Otherwise the sender retries with back-off, no sooner than `retry_after`
    seconds when the provider said so."""

    def __init__(
        self, message: str, *, permanent: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class WalletProvider(Protocol):
    """Sets the balance shown on a fan's pass, silently (no notification to the fan).
    Idempotent: the balance is absolute, so delivering it twice is harmless. Raises
    WalletDeliveryError on failure. Must return (or raise) within a bounded time: the
    sender's claim on the fan is a lease (see wallet.outbox)."""

    def deliver(self, fan: FanPass, saldo: int) -> None: ...


@runtime_checkable
class BatchWalletProvider(WalletProvider, Protocol):
    """A provider that takes a whole claimed batch in one call (the sender calls
    `deliver` of any other provider once per fan, a few fans at a time)."""

    def deliver_batch(self, batch: Sequence[Delivery]) -> Sequence[Exception | None]:
        """One outcome per delivery, in order: None when delivered, else what `deliver`
        would have raised (a WalletDeliveryError, or anything else for a bug: retried).
        Raising fails every delivery of the batch (retried)."""
        ...


@runtime_checkable
class SupportsClose(Protocol):
    """A provider holding resources (an HTTP session) is closed when its sender stops."""

    def close(self) -> None: ...


class LocalProvider:
    """The default: no wallet service, each delivery is a row of `wallet_entregas`; a
    batch is one INSERT in one transaction."""

    name = "local"

    def __init__(self, engine: Database) -> None:
        self._engine = engine

    def deliver(self, fan: FanPass, saldo: int) -> None:
        self.deliver_batch([Delivery(fan, saldo)])

    def deliver_batch(self, batch: Sequence[Delivery]) -> list[Exception | None]:
        with self._engine.begin() as conn:
            wallet_store.record_deliveries(
                conn,
                self.name,
                [d.fan.programa_id for d in batch],
                [d.fan.fan_pk for d in batch],
                [d.saldo for d in batch],
            )
        return [None] * len(batch)
