"""Back office: loyalty programs (upsert by id, list). The records (`Programa`,
`UpsertResult`) live in store/programs.py."""

from __future__ import annotations

from loyalty_grpc.domain import programs as rules
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.store import programs as store
from loyalty_grpc.store.programs import Programa, UpsertResult
from loyalty_grpc.store.uow import UnitOfWork

__all__ = ["Programa", "UpsertResult", "list_programs", "upsert_program"]


def upsert_program(
    uow: UnitOfWork,
    programa_id: str,
    nombre: str,
    tasa_puntos: str,
    *,
    qr_url: str = "",
    moneda: str = "",
) -> UpsertResult:
    """Create the program `programa_id` or set its fields to these values (`moneda` empty:
    MXN). `creado` tells which."""
    return store.upsert_program(
        uow.conn,
        rules.program_id(programa_id),
        single_line(nombre, "nombre"),
        rules.parse_tasa(tasa_puntos),
        qr_url=rules.check_qr_url(qr_url),
        moneda=rules.check_moneda(moneda),
    )


def list_programs(uow: UnitOfWork) -> list[Programa]:
    """Every program, by id."""
    return store.list_programs(uow.conn)
