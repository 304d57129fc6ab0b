"""Lookups the back-office use cases share: a program, a fan, a promotion of a program,
each locked or not, each with its not-found error, taking the unit of work. The reads
are store/lookups.py's; fans.py and points.py call them there, codes.py, promos.py,
fixtures.py and services/pos/codes.py through these names."""

from __future__ import annotations

from loyalty_grpc.store import lookups as store
from loyalty_grpc.store.fans import FanRow
from loyalty_grpc.store.lookups import PromoRow
from loyalty_grpc.store.params import text_array
from loyalty_grpc.store.uow import UnitOfWork

# Still importable from here for services/backoffice/fixtures.py until its SQL moves to
# store/ (then: from store/params.py).
__all__ = ["require_fan", "require_program", "require_promo", "text_array"]


def require_program(uow: UnitOfWork, programa: str) -> None:
    """programa_no_encontrado unless the program exists (locked against a concurrent
    change of its row until the transaction ends)."""
    store.require_program(uow.conn, programa)


def require_fan(uow: UnitOfWork, programa: str, fan_id: str, *, lock: bool = False) -> FanRow:
    """The fan (any state; locked with `lock`), or fan_no_encontrado; the program must
    exist."""
    return store.require_fan(uow.conn, programa, fan_id, lock=lock)


def require_promo(uow: UnitOfWork, programa: str, promo_id: int, *, lock: bool = False) -> PromoRow:
    """The promotion (locked with `lock`), or promo_no_encontrada; the program must
    exist."""
    return store.require_promo(uow.conn, programa, promo_id, lock=lock)
