"""Who is calling: a POS call's `Authorization: Bearer <key>` -> the key's program, mode
and permissions (domain/keys.py, looked up through the cache of api/key_cache.py); a
back-office call's bearer token -> compared with the admin token in constant time. Either
way a wrong credential is clave_invalida.

A POS key the cache holds as valid is the whole check (a hash and a dict lookup). Any
other well-formed key goes through the limit on failed key checks per client address
(api/failed_checks.py, api/client_address.py) unless it worked recently: over the limit
the call is refused with demasiadas_llamadas and Retry-After, without a lookup, and, on a
call through the gateway, the trailing metadata ADDRESS_BLOCKED_KEY with the same seconds
(api/gateway_protocol.py).
"""

from __future__ import annotations

import hmac

import grpc

from loyalty_grpc.api.call_metadata import Metadata, metadata_value
from loyalty_grpc.api.client_address import ClientAddress, client_address
from loyalty_grpc.api.failed_checks import Blocked, FailedChecks
from loyalty_grpc.api.gateway_protocol import ADDRESS_BLOCKED_KEY
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain import keys
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError


class PosKeys:
    """POS calls: the caller of a live or test key that exists and is not revoked.
    `failed_checks`: the limit on failed key checks per client address (None: none)."""

    def __init__(self, keys_cache: KeyCache, failed_checks: FailedChecks | None = None) -> None:
        self._keys = keys_cache
        self._failed = failed_checks

    def caller(self, context: grpc.ServicerContext, extra: Metadata | None = None) -> Caller:
        """The call's caller; `extra` gets the address verdict of a refused gateway call."""
        token = keys.bearer_token(metadata_value(context, "authorization"))
        if keys.mode_of(token) is None:
            raise _invalid()
        digest = keys.key_hash(token)
        caller = self._keys.cached(digest)
        if caller is not None:
            return caller
        if self._failed is None:
            caller = self._keys.look_up(token, digest)
            if caller is None:
                raise _invalid()
            return caller
        return self._limited(token, digest, self._failed, context, extra)

    def _limited(
        self,
        token: str,
        digest: bytes,
        failed: FailedChecks,
        context: grpc.ServicerContext,
        extra: Metadata | None,
    ) -> Caller:
        if self._keys.known(digest):  # it worked recently: looked up whatever the address
            caller = self._keys.look_up(token, digest)
            if caller is None:  # it no longer does (revoked): that counts
                failed.failed(client_address(context).counted_as)
                raise _invalid()
            return caller
        address = client_address(context)
        verdict = failed.reserve(address.counted_as)
        if isinstance(verdict, Blocked):
            raise _blocked(verdict, failed, address, extra)
        try:
            caller = self._keys.look_up(token, digest)
        except BaseException:
            failed.succeeded(verdict)  # the database failed, not the key
            raise
        if caller is None:
            raise _invalid()
        failed.succeeded(verdict)
        return caller


class AdminToken:
    """Back-office calls: the one admin token (LOYALTY_ADMIN_TOKEN)."""

    def __init__(self, admin_token: str) -> None:
        if not admin_token:
            raise ValueError("the admin token must not be empty")
        self._token = admin_token.encode()

    def check(self, context: grpc.ServicerContext) -> None:
        token = keys.bearer_token(metadata_value(context, "authorization"))
        if not hmac.compare_digest(token.encode(), self._token):
            raise LoyaltyError(
                CodigoError.CLAVE_INVALIDA, "el token de administración no es válido"
            )


def _invalid() -> LoyaltyError:
    return LoyaltyError(CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)


def _blocked(
    verdict: Blocked, failed: FailedChecks, address: ClientAddress, extra: Metadata | None
) -> LoyaltyError:
    if address.via_gateway and extra is not None:
        extra.append((ADDRESS_BLOCKED_KEY, str(verdict.seconds)))
    return LoyaltyError(
        CodigoError.DEMASIADAS_LLAMADAS,
        f"{failed.limit} claves no válidas en {failed.window:g} s desde esta dirección; "
        f"reintente en {verdict.seconds} s (una clave que ya funcionó sigue funcionando)",
        retry_after=verdict.seconds,
    )


__all__ = ["AdminToken", "PosKeys"]
