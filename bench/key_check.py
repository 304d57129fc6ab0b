"""What a POS call's key check costs at the edge (api/authentication.py `PosKeys.caller`),
in-process: no server, no database (the lookup is a function that answers at once), so
only the edge's own work is timed (a benchmark, not a test).

    .venv/bin/python bench/key_check.py [--calls 200000] [--repeat 7]

Cases, each the best of `--repeat` runs of `--calls` calls, in µs per call:
- `valid, cached`: a key the cache holds, with the limit on failed checks configured: the
  path of every `tx` and `fan/resolve`;
- `valid, cached, no limit`: the same with LOYALTY_FAILED_KEY_CHECKS_PER_MINUTE=0 (the
  difference is what the limit adds to that path: nothing but an attribute test);
- `known, past the TTL`: a key that worked, looked up again (the lookup itself not
  counted: it answers at once), from an address over its limit;
- `unknown, cached miss`: a wrong key the cache remembers, from an address under its limit
  (the limit set out of reach): the failed check counted;
- `unknown, address blocked`: a wrong key from an address over its limit, through the
  gateway: refused without a lookup (429 and the verdict).
Calls come as Envoy sends them: the gateway mark, the client address and five other
metadata entries.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import cast

import grpc

from loyalty_grpc.api.authentication import PosKeys
from loyalty_grpc.api.call_metadata import Metadata
from loyalty_grpc.api.failed_checks import FailedChecks
from loyalty_grpc.api.gateway_protocol import (
    CLIENT_ADDRESS_KEY,
    GATEWAY_MARK_KEY,
    GATEWAY_MARK_VALUE,
)
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import LoyaltyError
from loyalty_grpc.domain.keys import Modo

VALID = "lp_vivo_" + "V" * 32
WRONG = "lp_vivo_" + "W" * 32
CALLER = Caller(
    programa_id="p",
    programa_nombre="P",
    clave_id=1,
    integracion="Caja",
    tasa_puntos=Decimal("0.1"),
    moneda="MXN",
    modo=Modo.VIVO,
    permisos=frozenset(),
)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


class Context:
    """What the key check reads of a call: its metadata (as Envoy sends it) and peer."""

    def __init__(self, key: str, address: str) -> None:
        self._metadata = (
            (":authority", "pos.example"),
            ("x-envoy-original-path", "/api/v1/tx"),
            ("x-envoy-original-method", "POST"),
            ("x-request-id", "0f9c2c38-27e4-4a51-9f53-4a6f1d3d1f0e"),
            ("authorization", f"Bearer {key}"),
            (GATEWAY_MARK_KEY, GATEWAY_MARK_VALUE),
            (CLIENT_ADDRESS_KEY, address),
            ("x-forwarded-proto", "http"),
        )

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"


def lookup(key: str) -> Caller | None:
    return CALLER if key == VALID else None


def timed(check: Callable[[], object], calls: int, repeat: int) -> float:
    """µs per call, the best run."""
    return min(timeit.repeat(check, number=calls, repeat=repeat)) / calls * 1e6


def refused(keys: PosKeys, context: grpc.ServicerContext) -> Callable[[], object]:
    def check() -> object:
        extra: Metadata = []
        try:
            return keys.caller(context, extra)
        except LoyaltyError as error:
            return error

    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    def ctx(key: str, address: str = "203.0.113.7") -> grpc.ServicerContext:
        return cast(grpc.ServicerContext, Context(key, address))

    clock = Clock()
    cache = KeyCache(lookup, ttl=5, clock=clock)
    limited = PosKeys(cache, FailedChecks(60, clock=clock))
    unlimited = PosKeys(cache)
    valid = ctx(VALID)
    limited.caller(valid, [])

    # An address over its limit (the valid key has worked: it passes).
    blocked = ctx(WRONG, "198.51.100.1")
    for _ in range(60):
        refused(limited, blocked)()
    expired = KeyCache(lookup, ttl=0, clock=clock)  # every call past the TTL
    known = PosKeys(expired, FailedChecks(60, clock=clock))
    known.caller(valid, [])
    for _ in range(60):
        refused(known, ctx(WRONG))()
    # The limit out of reach: every wrong key is counted, none refused.
    counting = PosKeys(cache, FailedChecks(10**12, clock=clock))

    cases: list[tuple[str, Callable[[], object]]] = [
        ("valid, cached", lambda: limited.caller(valid, [])),
        ("valid, cached, no limit", lambda: unlimited.caller(valid, [])),
        ("known, past the TTL", lambda: known.caller(valid, [])),
        ("unknown, cached miss", refused(counting, ctx(WRONG))),
        ("unknown, address blocked", refused(limited, blocked)),
    ]
    print(f"{args.calls} calls per run, best of {args.repeat}")
    for name, check in cases:
        print(f"  {name:<26} {timed(check, args.calls, args.repeat):6.2f} µs per call")


if __name__ == "__main__":
    main()
