"""The key cache (api/key_cache.py) on a fake clock: valid keys and misses in maps of their
own, each evicting one entry at a time; the keys that worked remembered apart; the TTL and
`clear` as before; many threads at once."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from decimal import Decimal

from loyalty_grpc.api.key_cache import REMEMBER_SECONDS, KeyCache
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import Modo, key_hash


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def _caller(clave_id: int = 1) -> Caller:
    return Caller(
        programa_id="p",
        programa_nombre="P",
        clave_id=clave_id,
        integracion="I",
        tasa_puntos=Decimal("0.1"),
        moneda="MXN",
        modo=Modo.VIVO,
        permisos=frozenset(),
    )


class Lookups:
    """The database: keys named `valid*` exist (until revoked); every lookup is recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.revoked: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, key: str) -> Caller | None:
        with self.lock:
            self.calls.append(key)
        if key.startswith("valid") and key not in self.revoked:
            return _caller(hash(key) % 1000)
        return None


def test_cache_hits_then_clears() -> None:
    calls: list[str] = []

    def lookup(key: str) -> Caller | None:
        calls.append(key)
        return _caller()

    cache = KeyCache(lookup, ttl=60)
    assert cache.get("k") == cache.get("k")
    assert calls == ["k"]
    cache.clear()
    cache.get("k")
    assert calls == ["k", "k"]


def test_zero_ttl_never_caches() -> None:
    lookups = Lookups()
    cache = KeyCache(lookups, ttl=0)
    for key in ("k", "k", "valid1", "valid1"):
        cache.get(key)
    assert lookups.calls == ["k", "k", "valid1", "valid1"]
    # Remembering a key that worked is not caching it: it admits nothing by itself.
    assert cache.known(key_hash("valid1"))
    assert cache.cached(key_hash("valid1")) is None


def test_valid_keys_and_misses_live_for_the_ttl() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=5, clock=clock)
    assert cache.get("valid1") is not None
    assert cache.get("nope") is None
    clock.now += 4.9
    assert cache.get("valid1") is not None
    assert cache.get("nope") is None
    assert lookups.calls == ["valid1", "nope"]
    clock.now += 0.2  # both expired
    assert cache.cached(key_hash("valid1")) is None
    cache.get("valid1")
    cache.get("nope")
    assert lookups.calls == ["valid1", "nope", "valid1", "nope"]


def test_a_revoked_key_stops_working_within_the_ttl() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=5, clock=clock)
    assert cache.get("valid1") is not None
    lookups.revoked.add("valid1")
    assert cache.get("valid1") is not None  # cached: as before, up to the TTL
    clock.now += 5.01
    assert cache.get("valid1") is None
    assert not cache.known(key_hash("valid1"))  # it no longer passes the address limit


def test_misses_never_evict_valid_keys() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=60, max_entries=10, clock=clock)
    valid = [f"valid{n}" for n in range(10)]
    for key in valid:
        cache.get(key)
    for n in range(10_000):  # a flood of random keys
        cache.get(f"random{n}")
    assert cache.sizes() == (10, 10, 10)
    before = len(lookups.calls)
    for key in valid:
        assert cache.cached(key_hash(key)) is not None
        assert cache.get(key) is not None
    assert len(lookups.calls) == before  # every valid key still a hit


def test_a_full_map_evicts_one_entry_the_oldest() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=60, max_entries=3, clock=clock)
    for n in range(3):
        cache.get(f"valid{n}")
        clock.now += 1
    cache.get("valid3")  # the fourth: valid0 (the oldest) goes, and only it
    assert [cache.cached(key_hash(f"valid{n}")) is not None for n in range(4)] == [
        False,
        True,
        True,
        True,
    ]


def test_a_key_looked_up_again_is_the_youngest() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=60, max_entries=3, clock=clock)
    for n in range(3):
        cache.get(f"valid{n}")
    clock.now += 61  # all expired, still held
    cache.get("valid0")  # looked up again: now the youngest
    cache.get("valid3")  # evicts valid1, the oldest, not valid0
    assert cache.sizes()[0] == 3
    assert cache.cached(key_hash("valid0")) is not None
    assert cache.cached(key_hash("valid3")) is not None
    assert lookups.calls == ["valid0", "valid1", "valid2", "valid0", "valid3"]


def test_keys_that_worked_are_remembered_for_a_day_and_through_clear() -> None:
    clock, lookups = Clock(), Lookups()
    cache = KeyCache(lookups, ttl=5, clock=clock)
    cache.get("valid1")
    cache.get("nope")
    assert cache.known(key_hash("valid1"))
    assert not cache.known(key_hash("nope"))
    cache.clear()  # the back office changed keys: the lookups go, the memory stays
    assert cache.cached(key_hash("valid1")) is None
    assert cache.known(key_hash("valid1"))
    clock.now += REMEMBER_SECONDS - 1
    assert cache.known(key_hash("valid1"))
    clock.now += 2
    assert not cache.known(key_hash("valid1"))
    cache.get("valid1")  # every successful lookup renews it
    clock.now += REMEMBER_SECONDS - 1
    assert cache.known(key_hash("valid1"))


def test_many_threads_at_once() -> None:
    """16 threads, each its own valid key among a flood of misses, on a small cache: every
    answer right, the bounds kept, and a valid key looked up at most once (its first time)
    while it stays cached."""
    lookups = Lookups()
    cache = KeyCache(lookups, ttl=3600, max_entries=64)
    errors: list[str] = []
    start = threading.Barrier(16)

    def hammer(n: int) -> None:
        start.wait()
        mine = f"valid{n}"
        for i in range(2_000):
            if cache.get(mine) is None:
                errors.append(f"{mine} refused")
            if cache.get(f"random{n}-{i}") is not None:
                errors.append("a random key admitted")

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    valid, misses, known = cache.sizes()
    assert (valid, misses, known) == (16, 64, 16)
    assert all(lookups.calls.count(f"valid{n}") == 1 for n in range(16))
