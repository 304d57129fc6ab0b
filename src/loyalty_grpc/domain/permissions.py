"""The permission table of the contract: which permission each POS operation needs."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from loyalty_grpc.domain.detalle import shown
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError


class Permiso(StrEnum):
    FAN_LEER = "fan:leer"
    TX_ESCRIBIR = "tx:escribir"
    REDEEM_ESCRIBIR = "redeem:escribir"
    CODIGOS_ESCRIBIR = "codigos:escribir"
    ROSTER_LEER = "roster:leer"


# PosService method name -> the permission it needs (None: any valid key).
REQUIRED: dict[str, Permiso | None] = {
    "Ping": None,
    "PingGet": None,
    "ResolveFan": Permiso.FAN_LEER,
    "RegisterTx": Permiso.TX_ESCRIBIR,
    "Redeem": Permiso.REDEEM_ESCRIBIR,
    "ListPromos": Permiso.CODIGOS_ESCRIBIR,
    "DepositCodes": Permiso.CODIGOS_ESCRIBIR,
    "Roster": Permiso.ROSTER_LEER,
    "RosterPost": Permiso.ROSTER_LEER,
}


def parse_permisos(names: Iterable[str]) -> frozenset[Permiso]:
    """Validate permission names (as written in a fixture or by the back office)."""
    known = {p.value: p for p in Permiso}
    result: set[Permiso] = set()
    for name in names:
        if name not in known:
            raise LoyaltyError(
                CodigoError.PERMISO_DESCONOCIDO,
                f"permiso {shown(name)} no existe; los permisos son: {', '.join(known)}",
            )
        result.add(known[name])
    return frozenset(result)


def check(operation: str, granted: frozenset[Permiso]) -> None:
    """Raise permiso_denegado unless `granted` allows `operation`."""
    if operation not in REQUIRED:
        raise LoyaltyError(
            CodigoError.ERROR_INTERNO, f"operación sin permiso declarado: {operation}"
        )
    needed = REQUIRED[operation]
    if needed is not None and needed not in granted:
        raise LoyaltyError(
            CodigoError.PERMISO_DENEGADO, f"esta operación requiere el permiso {needed}"
        )


def sorted_names(granted: Iterable[Permiso]) -> list[str]:
    """Permissions in the contract's table order, as `ping` reports them."""
    order = list(Permiso)
    return [p.value for p in sorted(set(granted), key=order.index)]
