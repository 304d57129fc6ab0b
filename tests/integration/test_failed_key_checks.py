"""The limit on failed key checks per client address on a real server and PostgreSQL,
counting the key lookups that reach the database (a counting wrapper around the real
lookup, services/backoffice/keys.authenticate, put into the server this module builds):
a flood of random well-formed keys from one address reaches the database at most `LIMIT`
times, the rest are 429 with Retry-After without a lookup; a key that worked keeps
working from the same address during the flood; another address is not affected; the
window passes and lookups resume; the key cache keeps the valid keys under a flood of
misses. The edge's clock is a real clock the tests can move forward.

Client addresses: native calls are their gRPC peer (127.0.0.1 here); calls that carry the
gateway mark are the `x-loyalty-client-address` they carry, as Envoy sends them
(tests/e2e/test_client_address.py runs it through Envoy)."""

from __future__ import annotations

import functools
import itertools
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import Engine

from loyalty_grpc.api import server as server_module
from loyalty_grpc.api.errors import RETRY_AFTER_KEY
from loyalty_grpc.api.gateway_protocol import (
    ADDRESS_BLOCKED_KEY,
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.api.server import GrpcServer, ServerSettings, build_server
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pos
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pos_grpc
from loyalty_grpc.services.backoffice.keys import authenticate
from tests.support import ADMIN_TOKEN, Admin, error_info

LIMIT = 20
TTL = 5.0
# The key cache's maps, small enough for a flood of a few hundred misses to overfill.
CACHE_ENTRIES = 64
PROGRAM = "intentos"


@dataclass
class Clock:
    """The real monotonic clock, `offset` seconds ahead."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@dataclass
class Lookups:
    """Every key the server looked up in the database, in order."""

    keys: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, keys: set[str] | None = None) -> int:
        with self.lock:
            return sum(1 for key in self.keys if keys is None or key in keys)


@dataclass
class Edge:
    server: GrpcServer
    stub: pos_grpc.PosServiceStub
    admin: Admin
    clock: Clock
    lookups: Lookups

    def new_key(self) -> str:
        return self.admin.key(PROGRAM, f"Caja {secrets.token_hex(4)}", [])[1]


@pytest.fixture(scope="module")
def edge(db_url: str) -> Iterator[Edge]:
    clock, lookups = Clock(), Lookups()

    def counted(engine: Engine, key: str) -> Caller | None:
        with lookups.lock:
            lookups.keys.append(key)
        return authenticate(engine, key)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "authenticate", counted)
        patch.setattr(
            server_module, "KeyCache", functools.partial(KeyCache, max_entries=CACHE_ENTRIES)
        )
        srv = build_server(
            ServerSettings(
                database_url=db_url,
                admin_token=ADMIN_TOKEN,
                port=0,
                max_workers=8,
                key_cache_seconds=TTL,
                failed_key_checks_per_minute=LIMIT,
                rate_limit_per_minute=1_000_000,
            ),
            clock=clock,
        )
    srv.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    admin = Admin(bo_grpc.BackofficeServiceStub(channel), ADMIN_TOKEN)
    admin.program(PROGRAM, "Club Intentos")
    try:
        yield Edge(srv, pos_grpc.PosServiceStub(channel), admin, clock, lookups)
    finally:
        channel.close()
        srv.stop()


_numbers = itertools.count()


def random_key() -> str:
    """A well-formed key nobody issued (unique in the module)."""
    return f"lp_vivo_{next(_numbers):08d}{secrets.token_hex(12)}"


def metadata(key: str, address: str | None) -> tuple[tuple[str, str], ...]:
    """A call with `key`, through the gateway from `address`, or native (None)."""
    sent = (("authorization", f"Bearer {key}"),)
    if address is None:
        return sent
    return (*sent, (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE), (CLIENT_ADDRESS_KEY, address))


@dataclass(frozen=True)
class Outcome:
    codigo: str | None  # None: the call succeeded
    trailing: dict[str, str]
    retry_delay: int | None = None


def ping(edge: Edge, key: str, address: str | None) -> Outcome:
    try:
        edge.stub.Ping(pos.PingRequest(), metadata=metadata(key, address))
    except grpc.RpcError as error:
        trailing = {item.key: str(item.value) for item in error.trailing_metadata() or ()}
        return Outcome(error_info(error).reason, trailing, _retry_delay(error))
    return Outcome(None, {})


def _retry_delay(error: grpc.RpcError) -> int | None:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return int(info.retry_delay.seconds)
    return None


def flood(edge: Edge, address: str | None, calls: int, threads: int = 8) -> list[Outcome]:
    """`calls` random keys from `address`, `threads` at a time."""
    keys = [random_key() for _ in range(calls)]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda key: ping(edge, key, address), keys))


INVALID = CodigoError.CLAVE_INVALIDA.value
TOO_MANY = CodigoError.DEMASIADAS_LLAMADAS.value


def test_a_flood_reaches_the_database_at_most_limit_times(edge: Edge) -> None:
    before = edge.lookups.count()
    outcomes = flood(edge, "203.0.113.1", 10 * LIMIT)
    assert Counter(o.codigo for o in outcomes) == {INVALID: LIMIT, TOO_MANY: 9 * LIMIT}
    assert edge.lookups.count() - before == LIMIT
    for refused in (o for o in outcomes if o.codigo == TOO_MANY):
        seconds = int(refused.trailing[RETRY_AFTER_KEY])
        assert 1 <= seconds <= 60
        assert refused.retry_delay == seconds
        # Through the gateway: the address verdict too, the same seconds.
        assert refused.trailing[ADDRESS_BLOCKED_KEY] == str(seconds)
    for invalid in (o for o in outcomes if o.codigo == INVALID):
        assert ADDRESS_BLOCKED_KEY not in invalid.trailing


def test_a_key_that_worked_keeps_working_during_the_flood(edge: Edge) -> None:
    address = "203.0.113.2"
    key = edge.new_key()
    assert ping(edge, key, address).codigo is None
    results: list[Outcome] = []

    def terminal() -> None:
        for _ in range(30):
            results.append(ping(edge, key, address))

    worker = threading.Thread(target=terminal)
    worker.start()
    outcomes = flood(edge, address, 5 * LIMIT)
    worker.join()
    assert Counter(o.codigo for o in outcomes) == {INVALID: LIMIT, TOO_MANY: 4 * LIMIT}
    assert [o.codigo for o in results] == [None] * 30
    # Past the cache's TTL the key is looked up again, still during the block: it works.
    edge.clock.offset += TTL + 1
    looked_up = edge.lookups.count({key})
    assert ping(edge, key, address).codigo is None
    assert edge.lookups.count({key}) == looked_up + 1
    assert ping(edge, random_key(), address).codigo == TOO_MANY
    # A valid key that has not worked here yet waits like any other.
    assert ping(edge, edge.new_key(), address).codigo == TOO_MANY


def test_another_address_is_not_affected(edge: Edge) -> None:
    flood(edge, "203.0.113.3", 3 * LIMIT)
    assert ping(edge, random_key(), "203.0.113.3").codigo == TOO_MANY
    assert ping(edge, random_key(), "198.51.100.3").codigo == INVALID
    assert ping(edge, edge.new_key(), "198.51.100.3").codigo is None
    assert ping(edge, edge.new_key(), None).codigo is None  # native, from 127.0.0.1


def test_lookups_resume_when_the_window_passes(edge: Edge) -> None:
    address = "203.0.113.4"
    flood(edge, address, 2 * LIMIT)
    assert ping(edge, random_key(), address).codigo == TOO_MANY
    edge.clock.offset += 61
    before = edge.lookups.count()
    outcomes = flood(edge, address, 2 * LIMIT)
    assert Counter(o.codigo for o in outcomes) == {INVALID: LIMIT, TOO_MANY: LIMIT}
    assert edge.lookups.count() - before == LIMIT


def test_native_callers_are_their_peer_and_get_no_verdict(edge: Edge) -> None:
    """Without the mark the address header is not read: a native caller that sends it
    is still counted under its peer, and a refusal carries no gateway verdict."""
    edge.clock.offset += 61  # a fresh window for 127.0.0.1
    outcomes = [ping(edge, random_key(), None) for _ in range(LIMIT)]
    assert {o.codigo for o in outcomes} == {INVALID}
    forged = (("authorization", f"Bearer {random_key()}"), (CLIENT_ADDRESS_KEY, "192.0.2.200"))
    with pytest.raises(grpc.RpcError) as caught:
        edge.stub.Ping(pos.PingRequest(), metadata=forged)
    assert error_info(caught.value).reason == TOO_MANY
    refused = ping(edge, random_key(), None)
    assert refused.codigo == TOO_MANY
    assert RETRY_AFTER_KEY in refused.trailing
    assert ADDRESS_BLOCKED_KEY not in refused.trailing
    edge.clock.offset += 61


def test_the_key_cache_keeps_the_valid_keys_under_a_flood_of_misses(edge: Edge) -> None:
    edge.clock.offset += 61
    keys = {edge.new_key() for _ in range(5)}
    for key in keys:
        assert ping(edge, key, "192.0.2.50").codigo is None
    looked_up = edge.lookups.count(keys)
    assert looked_up == len(keys)
    # Far more misses than the cache holds, from many addresses (each under its limit).
    misses = 0
    for n in range(CACHE_ENTRIES // 4):
        outcomes = flood(edge, f"198.51.100.{100 + n}", LIMIT - 1)
        misses += sum(1 for o in outcomes if o.codigo == INVALID)
    assert misses == (CACHE_ENTRIES // 4) * (LIMIT - 1) > 4 * CACHE_ENTRIES
    for key in keys:
        assert ping(edge, key, "192.0.2.50").codigo is None
    assert edge.lookups.count(keys) == looked_up  # every one still cached
