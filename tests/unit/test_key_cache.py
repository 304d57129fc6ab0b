from __future__ import annotations

from decimal import Decimal

from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.keys import Modo


def _caller() -> Caller:
    return Caller(
        programa_id="p",
        programa_nombre="P",
        clave_id=1,
        integracion="I",
        tasa_puntos=Decimal("0.1"),
        moneda="MXN",
        modo=Modo.VIVO,
        permisos=frozenset(),
    )


def test_cache_hits_then_clears():
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


def test_zero_ttl_never_caches():
    calls: list[str] = []

    def lookup(key: str) -> Caller | None:
        calls.append(key)
        return None

    cache = KeyCache(lookup, ttl=0)
    cache.get("k")
    cache.get("k")
    assert calls == ["k", "k"]
