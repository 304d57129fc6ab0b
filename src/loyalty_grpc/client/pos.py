"""PosClient: every loyalty.v1.PosService operation for internal services, over the
native gRPC port, with the typed fields (api/native_fields.py) in and plain typed values
out (client/results.py), the README's retry rules built in (client/retry.py) and failures
raised as LoyaltyCallError (client/errors.py).

Each operation builds its request once and resends exactly that request on a retry (the
same `id_externo` for a sale, the same codes for a redemption): every POS operation is
idempotent, so a retried sale whose first answer was lost answers `duplicado`. The HTTP
twins of two bindings (PingGet, the GET Roster) are the same operations for a native
caller: `ping` and `roster` call Ping and RosterPost.

    with PosClient.connect("127.0.0.1:50051", key) as pos:
        sale = pos.register_sale("V-1", "DEMO0001", centavos=12550)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from types import TracebackType
from typing import TypeVar

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from loyalty_grpc.client import results
from loyalty_grpc.client.channel import key_metadata, open_pos_channel
from loyalty_grpc.client.retry import Clock, RetryPolicy, call_with_retries
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.settings import GrpcTls

Resp = TypeVar("Resp", bound=Message)


def _timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    """An aware datetime (a naive one is UTC) as a Timestamp."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))
    return stamp


class PosClient:
    """The PosService calls of one API key over `channel` (closed by `close` only when the
    client opened it: `connect`)."""

    def __init__(
        self,
        channel: grpc.Channel,
        key: str,
        policy: RetryPolicy | None = None,
        *,
        clock: Clock | None = None,
        owns_channel: bool = False,
    ) -> None:
        self._channel = channel
        self._stub = pb_grpc.PosServiceStub(channel)
        self._metadata = key_metadata(key)
        self._policy = policy or RetryPolicy()
        self._clock = clock
        self._owns_channel = owns_channel

    @classmethod
    def connect(
        cls,
        target: str,
        key: str,
        policy: RetryPolicy | None = None,
        *,
        tls: GrpcTls | None = None,
        clock: Clock | None = None,
    ) -> PosClient:
        """A client with a channel of its own to the gRPC port `target` (HOST:PORT)."""
        policy = policy or RetryPolicy()
        channel = open_pos_channel(target, policy, tls)
        return cls(channel, key, policy, clock=clock, owns_channel=True)

    def close(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> PosClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: Callable[..., Resp], request: Message) -> Resp:
        def attempt(timeout: float) -> Resp:
            return method(request, metadata=self._metadata, timeout=timeout)

        return call_with_retries(self._policy, attempt, self._clock)

    # ------------------------------------------------------------ the operations

    def ping(self) -> results.Ping:
        """Who the key is (no permission needed)."""
        return results.ping_of(self._call(self._stub.Ping, pb.PingRequest()).data)

    def resolve_fan(self, fan: str) -> results.ResolvedFan:
        """The fan named by any of its five forms, and its current promotion (fan:leer)."""
        reply = self._call(self._stub.ResolveFan, pb.ResolveFanRequest(fan=fan))
        return results.resolved_of(reply.data)

    def register_sale(
        self,
        id_externo: str,
        fan: str,
        *,
        centavos: int | None = None,
        importe: Decimal | str | None = None,
        ts: datetime | None = None,
        terminal: str | None = None,
        sitio: str | None = None,
        moneda: str | None = None,
    ) -> results.Sale:
        """A closed sale (tx:escribir): the amount in integer `centavos` or `importe` in
        pesos (a Decimal or the text a till prints); `ts` absent is now."""
        request = pb.RegisterTxRequest(
            id_externo=id_externo,
            fan=fan,
            importe_texto="" if importe is None else str(importe),
            terminal=terminal or "",
            sitio=sitio or "",
            moneda=moneda or "",
        )
        if centavos is not None:
            request.importe_centavos_entero = centavos
        if ts is not None:
            request.ts_utc.CopyFrom(_timestamp(ts))
        return results.sale_of(self._call(self._stub.RegisterTx, request).data)

    def redeem(
        self, codigo: str, *, terminal: str | None = None, ts: datetime | None = None
    ) -> results.Redemption:
        """Redeems one coupon code (redeem:escribir)."""
        request = pb.RedeemRequest(codigo=codigo, terminal=terminal or "")
        if ts is not None:
            request.ts_utc.CopyFrom(_timestamp(ts))
        return results.redemption_of(self._call(self._stub.Redeem, request).data)

    def redeem_batch(
        self, codigos: Sequence[str], *, terminal: str | None = None, ts: datetime | None = None
    ) -> results.Batch:
        """Redeems up to 500 codes (redeem:escribir); each entry says how its code fared."""
        request = pb.RedeemRequest(codigos=list(codigos), terminal=terminal or "")
        if ts is not None:
            request.ts_utc.CopyFrom(_timestamp(ts))
        return results.batch_of(self._call(self._stub.Redeem, request).data)

    def list_promos(self) -> tuple[results.Promo, ...]:
        """The program's promotions with their inventory (codigos:escribir)."""
        reply = self._call(self._stub.ListPromos, pb.ListPromosRequest())
        return results.promos_of(reply.data)

    def deposit_codes(self, promo: int | str, codigos: Sequence[str]) -> results.Deposit:
        """Adds codes to a promotion given by id or name (codigos:escribir)."""
        request = pb.DepositCodesRequest(codigos_lista=list(codigos))
        if isinstance(promo, int):
            request.promo_id_entero = promo
        else:
            request.promo_texto = promo
        return results.deposit_of(self._call(self._stub.DepositCodes, request).data)

    def roster(self, desde: str | None = None, limite: int | None = None) -> results.RosterPage:
        """One page of the roster feed (roster:leer): `desde` the previous `siguiente`."""
        request = pb.RosterPostRequest(desde_texto=desde or "")
        if limite is not None:
            request.limite_entero = limite
        return results.roster_of(self._call(self._stub.RosterPost, request).data)


__all__ = ["PosClient"]
