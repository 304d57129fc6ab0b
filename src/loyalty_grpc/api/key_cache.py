"""API-key lookups cached in-process for a short time (default 5 s, env
LOYALTY_KEY_CACHE_SECONDS): a key check costs a database round trip otherwise on every call.
A revocation reaches this process at once (the back office clears the cache) and other
processes within the TTL.

Three bounded maps, keyed by the key's SHA-256 (the cache never holds a key itself), each
evicting one entry at a time, the oldest first (`_Entries`):

- the keys that work (their Caller), for the TTL;
- the keys that do not (unknown, revoked), for the TTL: a miss never evicts a valid key,
  so a flood of random keys cannot push the keys in use out of the cache;
- the keys that worked recently (`known`), for REMEMBER_SECONDS after their last
  successful lookup, whatever the TTL: they never admit a call by themselves (a call
  always needs a fresh valid entry or a lookup, so a revocation stops a key within the
  TTL as before); they only let a key through the per-address limit on failed key checks
  (api/failed_checks.py) so that a terminal behind the same address as an attacker keeps
  working. A lookup that finds the key gone forgets it there too.

The valid-key path (`cached`) is what it was: a hash, a dict lookup under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import key_hash

DEFAULT_TTL_SECONDS = 5.0
# Each map's bound (entries of ~200 bytes: about 2 MB each when full).
MAX_ENTRIES = 10_000
# How long a key that worked is remembered as one (a day: it covers a flood of any length
# and a terminal's pause overnight; refreshed by every successful lookup of the key, i.e.
# once per TTL while the key is in use).
REMEMBER_SECONDS = 86_400.0


V = TypeVar("V")


class _Entries(Generic[V]):
    """A map with an expiry per entry and at most `limit` entries; inserting beyond it
    evicts the entry inserted (or refreshed) longest ago. Every entry of a map lives as
    long as the others, so that is also the one that expires first. Not thread-safe: the
    cache holds its lock around every call."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._items: OrderedDict[bytes, tuple[float, V]] = OrderedDict()
        # The entry whether expired or not (the valid-key path: the dict's own method).
        self.get = self._items.get

    def fresh(self, digest: bytes, now: float) -> tuple[float, V] | None:
        """The entry if it has not expired (a plain lookup: no reordering)."""
        item = self._items.get(digest)
        return item if item is not None and item[0] > now else None

    def put(self, digest: bytes, expires: float, value: V) -> None:
        self._items.pop(digest, None)
        self._items[digest] = (expires, value)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def drop(self, digest: bytes) -> None:
        self._items.pop(digest, None)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class KeyCache:
    def __init__(
        self,
        lookup: Callable[[str], Caller | None],
        ttl: float = DEFAULT_TTL_SECONDS,
        *,
        max_entries: int = MAX_ENTRIES,
        remember_seconds: float = REMEMBER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._remember = remember_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._valid: _Entries[Caller] = _Entries(max_entries)
        self._misses: _Entries[None] = _Entries(max_entries)
        self._known: _Entries[None] = _Entries(max_entries)

    def cached(self, digest: bytes) -> Caller | None:
        """The caller of a key (by `key_hash`) looked up and found valid within the TTL."""
        with self._lock:
            hit = self._valid.get(digest)
        return hit[1] if hit is not None and hit[0] > self._clock() else None

    def known(self, digest: bytes) -> bool:
        """Whether the key was found valid within REMEMBER_SECONDS (and not found gone
        since)."""
        with self._lock:
            return self._known.fresh(digest, self._clock()) is not None

    def look_up(self, key: str, digest: bytes) -> Caller | None:
        """The key's caller, or None when it is unknown or revoked: a miss cached within
        the TTL answers None at once; anything else is looked up (and cached)."""
        now = self._clock()
        with self._lock:
            if self._misses.fresh(digest, now) is not None:
                return None
        caller = self._lookup(key)
        with self._lock:
            if caller is None:
                self._known.drop(digest)
                if self._ttl > 0:
                    self._misses.put(digest, now + self._ttl, None)
            else:
                self._known.put(digest, now + self._remember, None)
                self._misses.drop(digest)
                if self._ttl > 0:
                    self._valid.put(digest, now + self._ttl, caller)
        return caller

    def get(self, key: str) -> Caller | None:
        """`cached`, else `look_up`."""
        digest = key_hash(key)
        return self.cached(digest) or self.look_up(key, digest)

    def clear(self) -> None:
        """Forget every lookup (the back office changed keys or programs); the keys known
        to have worked stay known (they admit nothing by themselves)."""
        with self._lock:
            self._valid.clear()
            self._misses.clear()

    def sizes(self) -> tuple[int, int, int]:
        """Entries held: (valid, misses, known)."""
        with self._lock:
            return len(self._valid), len(self._misses), len(self._known)


__all__ = ["DEFAULT_TTL_SECONDS", "MAX_ENTRIES", "REMEMBER_SECONDS", "KeyCache"]
