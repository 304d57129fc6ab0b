"""Unique-index violations, told apart by the index's name (the concurrent case that a
pre-check cannot see: both writers checked before either committed), turned into the
domain's errors here, so that no use case sees a database exception.

Every store function that inserts or updates a row under a unique index runs its
statement inside `translated({index: error, ...})`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError


def violated_constraint(exc: IntegrityError) -> str | None:
    """The name of the constraint or unique index PostgreSQL reports as violated."""
    diag = getattr(exc.orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    return name if isinstance(name, str) else None


def translate(exc: IntegrityError, by_constraint: Mapping[str, LoyaltyError]) -> LoyaltyError:
    """The domain error for a known unique index; an unknown violation is a bug
    (error_interno, chained to the original for the logs)."""
    name = violated_constraint(exc)
    if name is not None and name in by_constraint:
        return by_constraint[name]
    error = LoyaltyError(CodigoError.ERROR_INTERNO, "violación de integridad inesperada")
    error.__cause__ = exc
    return error


@contextmanager
def translated(by_constraint: Mapping[str, LoyaltyError]) -> Iterator[None]:
    """Run the block's statement; an IntegrityError leaves it as `translate`'s domain error
    (chained to the original)."""
    try:
        yield
    except IntegrityError as exc:
        raise translate(exc, by_constraint) from exc
