"""Unique-index violations, told apart by the index's name (the concurrent case that a
pre-check cannot see: both writers checked before either committed), turned into the
domain's errors here, so that no use case sees a database exception.

Every store function that inserts or updates a row under a unique index runs its
statement inside `translated({index: error, ...})`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError

# On Citus the violation happens on a worker, in a shard's copy of the index, named as the
# table's index with the shard id appended (uq_fans_programa_correo_102040), and the
# coordinator passes on the worker's message without the constraint's field: the name
# quoted in the message, without that suffix.
_SHARD_SUFFIX = re.compile(r"_[0-9]+$")
_QUOTED = re.compile(r'"([^"]+)"')


def violated_constraint(exc: IntegrityError) -> str | None:
    """The name of the constraint or unique index PostgreSQL reports as violated (the
    error's field; else, as Citus reports a worker's, the last name quoted in its
    message)."""
    diag = getattr(exc.orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if isinstance(name, str):
        return name
    message = getattr(diag, "message_primary", None)
    quoted = _QUOTED.findall(message) if isinstance(message, str) else []
    return quoted[-1] if quoted else None


def translate(exc: IntegrityError, by_constraint: Mapping[str, LoyaltyError]) -> LoyaltyError:
    """The domain error for a known unique index (or a Citus shard's copy of it); an unknown
    violation is a bug (error_interno, chained to the original for the logs)."""
    name = violated_constraint(exc)
    for candidate in () if name is None else (name, _SHARD_SUFFIX.sub("", name)):
        if candidate in by_constraint:
            return by_constraint[candidate]
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
