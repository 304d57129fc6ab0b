"""The retry rules of README "Retrying calls", for native gRPC callers: retry a call that
got no answer or was told to come back (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED),
never any other error (it is final: fix the request); resend the very same request (the same
`id_externo`: every POS operation is idempotent); back off exponentially from 50 ms to at
most 2 s plus a random 0-50 %, at least as long as the server's google.rpc.RetryInfo asks;
each attempt has its own deadline (longer than the server's 15 s) within an overall one,
after which the last error is raised."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from loyalty_grpc.client.errors import LoyaltyCallError, call_error

T = TypeVar("T")

RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds. `deadline`: the most a call may take, retries included (None: one attempt,
    no retry); `call_timeout`: each attempt's deadline (the server answers within 15 s)."""

    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    jitter: float = 0.5
    deadline: float | None = 30.0
    call_timeout: float = 20.0
    retryable: frozenset[grpc.StatusCode] = field(default=RETRYABLE)

    def backoff(self, retry: int, draw: float) -> float:
        """The wait before retry number `retry` (0 first), `draw` in [0, 1)."""
        base = min(self.max_backoff, self.initial_backoff * 2.0**retry)
        return base * (1 + self.jitter * draw)


@dataclass(frozen=True)
class Clock:
    """What the retries read and do with time (tests give their own)."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    draw: Callable[[], float] = random.random


def call_with_retries(
    policy: RetryPolicy, attempt: Callable[[float], T], clock: Clock | None = None
) -> T:
    """`attempt(timeout)` until it succeeds, fails for good, or the deadline would pass
    before the next try; raises LoyaltyCallError (the last failure)."""
    clock = clock or Clock()
    start = clock.now()
    retry = 0
    while True:
        left = None if policy.deadline is None else policy.deadline - (clock.now() - start)
        timeout = policy.call_timeout if left is None else max(0.0, min(policy.call_timeout, left))
        try:
            return attempt(timeout)
        except grpc.RpcError as failed:
            error = call_error(failed, attempts=retry + 1)
        wait = _wait(policy, error, retry, clock)
        if wait is None or (
            policy.deadline is not None and clock.now() - start + wait >= policy.deadline
        ):
            raise error from None
        clock.sleep(wait)
        retry += 1


def _wait(policy: RetryPolicy, error: LoyaltyCallError, retry: int, clock: Clock) -> float | None:
    """How long to wait before the next try; None: do not retry."""
    if policy.deadline is None or error.status not in policy.retryable:
        return None
    wait = policy.backoff(retry, clock.draw())
    if error.retry_after is not None:
        wait = max(wait, error.retry_after)
    return wait


__all__ = ["RETRYABLE", "Clock", "RetryPolicy", "call_with_retries"]
