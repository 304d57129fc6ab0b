"""The per-key call limit at the edge (services/rate_limit.py): every authenticated POS
call takes one call from its key's quota, before the permission check (so a refused call
counts too). Over the limit: demasiadas_llamadas with Retry-After/RetryInfo. The IETF
RateLimit fields (`ratelimit-policy`, `ratelimit`) are added to the call's metadata, which
goes out as initial metadata on success and as trailing metadata on an error (an error
must stay trailers-only for the Lua envelope filter, so nothing is sent before the outcome
is known: the interceptor sends it)."""

from __future__ import annotations

from loyalty_grpc.api.call_metadata import Metadata
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.rate_limit import LimitKey
from loyalty_grpc.services.rate_limit import RateLimiter

RATELIMIT_POLICY_KEY = "ratelimit-policy"
RATELIMIT_KEY = "ratelimit"


def admit(limiter: RateLimiter, caller: Caller, extra: Metadata) -> None:
    """Take one call of `caller`'s key, add the RateLimit fields to `extra`, and raise
    demasiadas_llamadas when the key is over its limit."""
    quota = limiter.take(LimitKey(caller.programa_id, caller.clave_id))
    extra += [(RATELIMIT_POLICY_KEY, quota.policy_header()), (RATELIMIT_KEY, quota.header())]
    if not quota.admitted:
        raise LoyaltyError(
            CodigoError.DEMASIADAS_LLAMADAS,
            f"más de {quota.limit} llamadas en 60 s con esta clave; "
            f"reintente en {quota.retry_after} s",
            retry_after=quota.retry_after,
        )


__all__ = ["RATELIMIT_KEY", "RATELIMIT_POLICY_KEY", "admit"]
