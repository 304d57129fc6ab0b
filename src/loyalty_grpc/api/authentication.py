"""Who is calling: a POS call's `Authorization: Bearer <key>` -> the key's program, mode
and permissions (domain/keys.py, looked up through the cache of api/key_cache.py); a
back-office call's bearer token -> compared with the admin token in constant time. Either
way a wrong credential is clave_invalida."""

from __future__ import annotations

import hmac

import grpc

from loyalty_grpc.api.call_metadata import metadata_value
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain import keys
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError


class PosKeys:
    """POS calls: the caller of a live or test key that exists and is not revoked."""

    def __init__(self, keys_cache: KeyCache) -> None:
        self._keys = keys_cache

    def caller(self, context: grpc.ServicerContext) -> Caller:
        token = keys.bearer_token(metadata_value(context, "authorization"))
        caller = self._keys.get(token) if keys.mode_of(token) else None
        if caller is None:
            raise LoyaltyError(CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)
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


__all__ = ["AdminToken", "PosKeys"]
