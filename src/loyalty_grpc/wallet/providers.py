"""What a wallet provider is, and the default one (local: records each delivery)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sqlalchemy import Engine, insert

from loyalty_grpc.store.tables import wallet_entregas


@dataclass(frozen=True)
class FanPass:
    """Whose pass to refresh. `programa_id` and `fan_id` (canonical) name the pass at the
    provider; `fan_pk` is our row."""

    fan_pk: int
    programa_id: str
    fan_id: str


class WalletDeliveryError(Exception):
    """A delivery failed. `permanent`: retrying the same balance cannot help (e.g. the fan
    has no pass); the sender drops it and tries again only on the fan's next balance
    change. Otherwise the sender retries with back-off, no sooner than `retry_after`
    seconds when the provider said so."""

    def __init__(self, message: str, *, permanent: bool = False,
                 retry_after: float | None = None) -> None:
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
class SupportsClose(Protocol):
    """A provider holding resources (an HTTP session) is closed when its sender stops."""

    def close(self) -> None: ...


class LocalProvider:
    """The default: no wallet service, each delivery is a row of `wallet_entregas`."""

    name = "local"

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def deliver(self, fan: FanPass, saldo: int) -> None:
        with self._engine.begin() as conn:
            conn.execute(insert(wallet_entregas).values(
                fan_pk=fan.fan_pk, saldo=saldo, proveedor=self.name))
