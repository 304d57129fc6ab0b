"""Who is calling the POS API: what an API key stands for once authenticated, with the
terms of its program that every sale needs (cached with the key: api/key_cache.py)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso


@dataclass(frozen=True)
class Caller:
    programa_id: str
    programa_nombre: str
    clave_id: int
    integracion: str
    modo: Modo
    permisos: frozenset[Permiso]
    # The program's points per peso (exact) and currency.
    tasa_puntos: Decimal
    moneda: str

    @property
    def earns_points(self) -> bool:
        """Only a live key's sales and redemptions move points; a test key's (`prueba`) are
        recorded with 0 points."""
        return self.modo is Modo.VIVO

    @property
    def sees_personal_data(self) -> bool:
        """A fan's name and e-mail are shown only to a key with `fan:leer`."""
        return Permiso.FAN_LEER in self.permisos
