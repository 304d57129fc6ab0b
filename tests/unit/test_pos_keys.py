"""A POS call's key check with the limit on failed checks per client address
(api/authentication.py PosKeys), on a fake clock and a recording lookup: what is counted,
what is refused without a lookup, what the refusal says, and the keys that pass anyway."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import cast

import grpc
import pytest

from loyalty_grpc.api.authentication import PosKeys
from loyalty_grpc.api.call_metadata import Metadata
from loyalty_grpc.api.failed_checks import FailedChecks
from loyalty_grpc.api.gateway_protocol import (
    ADDRESS_BLOCKED_KEY,
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo

LIMIT = 5
VALID = "lp_vivo_" + "V" * 32
OTHER_VALID = "lp_prueba_" + "W" * 32


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Database:
    valid: set[str] = field(default_factory=lambda: {VALID, OTHER_VALID})
    lookups: list[str] = field(default_factory=list)
    down: bool = False

    def __call__(self, key: str) -> Caller | None:
        if self.down:
            raise ConnectionError("the database is away")
        self.lookups.append(key)
        if key not in self.valid:
            return None
        return Caller(
            programa_id="p",
            programa_nombre="P",
            clave_id=len(key),
            integracion="I",
            tasa_puntos=Decimal("0.1"),
            moneda="MXN",
            modo=Modo.VIVO,
            permisos=frozenset(),
        )


class Context:
    def __init__(self, metadata: list[tuple[str, str]], peer: str) -> None:
        self._metadata = tuple(metadata)
        self._peer = peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer


def call(key: str, *, via: str | None = None, peer: str = "127.0.0.1") -> grpc.ServicerContext:
    """A call with `key`: through the gateway for client address `via`, else native."""
    metadata = [("authorization", f"Bearer {key}")]
    if via is not None:
        metadata += [(GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE), (CLIENT_ADDRESS_KEY, via)]
    return cast(grpc.ServicerContext, Context(metadata, f"ipv4:{peer}:45000"))


@dataclass
class Edge:
    clock: Clock
    database: Database
    keys: PosKeys

    def check(self, context: grpc.ServicerContext) -> tuple[Caller | LoyaltyError, Metadata]:
        extra: Metadata = []
        try:
            return self.keys.caller(context, extra), extra
        except LoyaltyError as error:
            return error, extra


@pytest.fixture
def edge() -> Edge:
    clock, database = Clock(), Database()
    cache = KeyCache(database, ttl=5, clock=clock)
    return Edge(clock, database, PosKeys(cache, FailedChecks(LIMIT, clock=clock)))


def random_keys() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"lp_vivo_{n:032d}"


def codigo(outcome: Caller | LoyaltyError) -> CodigoError | None:
    return outcome.codigo if isinstance(outcome, LoyaltyError) else None


def flood(edge: Edge, via: str | None, n: int, keys: Iterator[str] | None = None) -> list[object]:
    keys = keys or random_keys()
    return [codigo(edge.check(call(next(keys), via=via))[0]) for _ in range(n)]


def test_a_flood_reaches_the_database_limit_times_then_429_without_lookup(edge: Edge) -> None:
    outcomes = flood(edge, "203.0.113.7", 50)
    assert outcomes == [CodigoError.CLAVE_INVALIDA] * LIMIT + [CodigoError.DEMASIADAS_LLAMADAS] * (
        50 - LIMIT
    )
    assert len(edge.database.lookups) == LIMIT


def test_the_refusal_says_when_and_carries_the_verdict_for_the_gateway(edge: Edge) -> None:
    flood(edge, "203.0.113.7", LIMIT)
    edge.clock.now += 20.5
    error, extra = edge.check(call("lp_vivo_" + "N" * 32, via="203.0.113.7"))
    assert isinstance(error, LoyaltyError)
    assert error.codigo == CodigoError.DEMASIADAS_LLAMADAS
    assert error.retry_after == 40
    assert extra == [(ADDRESS_BLOCKED_KEY, "40")]
    assert "reintente en 40 s" in error.detalle
    assert "203.0.113.7" not in error.detalle  # an address is personal data


def test_a_native_call_gets_no_verdict(edge: Edge) -> None:
    flood(edge, None, LIMIT)
    error, extra = edge.check(call("lp_vivo_" + "N" * 32))
    assert codigo(error) == CodigoError.DEMASIADAS_LLAMADAS
    assert isinstance(error, LoyaltyError)
    assert error.retry_after == 60
    assert extra == []


def test_a_key_that_worked_keeps_working_during_the_flood(edge: Edge) -> None:
    assert isinstance(edge.check(call(VALID, via="203.0.113.7"))[0], Caller)
    flood(edge, "203.0.113.7", 3 * LIMIT)
    for _ in range(3):  # beyond the TTL: looked up again, not refused
        edge.clock.now += 6
        assert isinstance(edge.check(call(VALID, via="203.0.113.7"))[0], Caller)
    # A valid key that never worked here is refused like the rest until the window passes.
    assert codigo(edge.check(call(OTHER_VALID, via="203.0.113.7"))[0]) == (
        CodigoError.DEMASIADAS_LLAMADAS
    )
    edge.clock.now += 60
    assert isinstance(edge.check(call(OTHER_VALID, via="203.0.113.7"))[0], Caller)


def test_another_address_is_not_affected(edge: Edge) -> None:
    flood(edge, "203.0.113.7", 3 * LIMIT)
    other = "198.51.100.1"
    assert flood(edge, other, LIMIT - 1) == [CodigoError.CLAVE_INVALIDA] * (LIMIT - 1)
    assert isinstance(edge.check(call(OTHER_VALID, via=other))[0], Caller)
    assert isinstance(edge.check(call(VALID))[0], Caller)  # native, from 127.0.0.1


def test_lookups_resume_when_the_window_passes(edge: Edge) -> None:
    flood(edge, "203.0.113.7", 2 * LIMIT)
    edge.clock.now += 60
    assert flood(edge, "203.0.113.7", LIMIT + 1) == [CodigoError.CLAVE_INVALIDA] * LIMIT + [
        CodigoError.DEMASIADAS_LLAMADAS
    ]
    assert len(edge.database.lookups) == 2 * LIMIT


def test_a_cached_miss_counts_too(edge: Edge) -> None:
    """A terminal looping on one revoked key: one lookup, then the cache answers, and it is
    throttled like a flood."""
    revoked = "lp_vivo_" + "R" * 32
    outcomes = [codigo(edge.check(call(revoked, via="192.0.2.9"))[0]) for _ in range(10)]
    assert outcomes == [CodigoError.CLAVE_INVALIDA] * LIMIT + [CodigoError.DEMASIADAS_LLAMADAS] * (
        10 - LIMIT
    )
    assert edge.database.lookups == [revoked]


def test_a_revoked_key_that_worked_counts_and_stops_passing(edge: Edge) -> None:
    assert isinstance(edge.check(call(VALID, via="192.0.2.9"))[0], Caller)
    edge.database.valid.discard(VALID)
    edge.clock.now += 6  # past the TTL
    assert codigo(edge.check(call(VALID, via="192.0.2.9"))[0]) == CodigoError.CLAVE_INVALIDA
    flood(edge, "192.0.2.9", LIMIT - 1)  # with the revoked key's failure: the limit
    assert codigo(edge.check(call(VALID, via="192.0.2.9"))[0]) == (CodigoError.DEMASIADAS_LLAMADAS)


def test_valid_keys_do_not_use_up_the_limit(edge: Edge) -> None:
    new_terminals = [f"lp_vivo_{n:032d}T" for n in range(3 * LIMIT)]
    edge.database.valid.update(new_terminals)
    for key in new_terminals:  # each one's first check: counted, then given back
        assert isinstance(edge.check(call(key, via="192.0.2.9"))[0], Caller)
    assert flood(edge, "192.0.2.9", LIMIT) == [CodigoError.CLAVE_INVALIDA] * LIMIT


@pytest.mark.parametrize(
    "header", [None, "Basic abc", "Bearer short", "Bearer lp_otro_" + "x" * 32]
)
def test_missing_or_malformed_keys_are_refused_without_counting(
    edge: Edge, header: str | None
) -> None:
    metadata = [] if header is None else [("authorization", header)]
    context = cast(grpc.ServicerContext, Context(metadata, "ipv4:192.0.2.9:1"))
    for _ in range(3 * LIMIT):
        error, _ = edge.check(context)
        assert codigo(error) in (CodigoError.NO_AUTENTICADO, CodigoError.CLAVE_INVALIDA)
    assert edge.database.lookups == []
    assert flood(edge, None, LIMIT, random_keys()) == [CodigoError.CLAVE_INVALIDA] * LIMIT


def test_a_database_failure_is_not_a_failed_check(edge: Edge) -> None:
    edge.database.down = True
    for _ in range(3 * LIMIT):
        with pytest.raises(ConnectionError):
            edge.keys.caller(call("lp_vivo_" + "D" * 32, via="192.0.2.9"), [])
    edge.database.down = False
    assert flood(edge, "192.0.2.9", LIMIT) == [CodigoError.CLAVE_INVALIDA] * LIMIT


def test_without_the_limit_every_failed_check_is_a_lookup() -> None:
    database = Database()
    keys = PosKeys(KeyCache(database, ttl=0))
    for key in (f"lp_vivo_{n:032d}" for n in range(100)):
        with pytest.raises(LoyaltyError) as raised:
            keys.caller(call(key, via="203.0.113.7"), [])
        assert raised.value.codigo == CodigoError.CLAVE_INVALIDA
    assert len(database.lookups) == 100
