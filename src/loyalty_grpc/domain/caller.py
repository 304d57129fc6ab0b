"""Who is calling the POS API: what an API key stands for once authenticated."""

from __future__ import annotations

from dataclasses import dataclass

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
