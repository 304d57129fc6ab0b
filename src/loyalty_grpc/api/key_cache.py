"""API-key lookups cached in-process for a short time (default 5 s, env
LOYALTY_KEY_CACHE_SECONDS): a key check costs a database round trip otherwise on every call.
A revocation reaches this process at once (the back office clears the cache) and other
processes within the TTL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import key_hash

DEFAULT_TTL_SECONDS = 5.0
_MAX_ENTRIES = 10_000


class KeyCache:
    def __init__(
        self, lookup: Callable[[str], Caller | None], ttl: float = DEFAULT_TTL_SECONDS
    ) -> None:
        self._lookup = lookup
        self._ttl = ttl
        self._lock = threading.Lock()
        # Keyed by the key's hash, so the cache never holds a secret.
        self._entries: dict[bytes, tuple[float, Caller | None]] = {}

    def get(self, key: str) -> Caller | None:
        if self._ttl <= 0:
            return self._lookup(key)
        digest = key_hash(key)
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        caller = self._lookup(key)
        with self._lock:
            if len(self._entries) >= _MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (now + self._ttl, caller)
        return caller

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
