"""`ping`: tells an integration what its key is."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.permissions import sorted_names
from loyalty_grpc.domain.timestamps import format_iso_utc


@dataclass(frozen=True)
class PingResult:
    integracion: str
    programa: str
    modo: str
    permisos: list[str]
    hora: str


def ping(caller: Caller, now: datetime) -> PingResult:
    return PingResult(
        integracion=caller.integracion,
        programa=caller.programa_nombre,
        modo=caller.modo.value,
        permisos=sorted_names(caller.permisos),
        hora=format_iso_utc(now),
    )
