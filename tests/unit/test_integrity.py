"""store/integrity.py tells a unique index's violation apart by its name, as PostgreSQL
reports it (the error's constraint field) and as a Citus coordinator passes on a worker's
(no such field; the shard's copy of the index named in the message, the shard id appended).
On the cluster: tests/citus/test_backoffice_on_citus.py (a race past a pre-check)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy.exc import IntegrityError

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.store.integrity import translate

KNOWN = {"uq_fans_programa_correo": LoyaltyError(CodigoError.CORREO_DUPLICADO, "correo")}


@dataclass
class Diag:
    constraint_name: str | None
    message_primary: str | None


@dataclass
class DriverError(Exception):
    diag: Diag


def _error(constraint: str | None, message: str | None) -> IntegrityError:
    return IntegrityError("INSERT …", {}, DriverError(Diag(constraint, message)))


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("uq_fans_programa_correo", 'duplicate key value violates unique constraint "x"'),
        (None, 'duplicate key value violates unique constraint "uq_fans_programa_correo"'),
        (None, 'duplicate key value violates unique constraint "uq_fans_programa_correo_102040"'),
        ("uq_fans_programa_correo_102040", None),
    ],
)
def test_a_known_index_is_its_domain_error(constraint: str | None, message: str | None) -> None:
    assert translate(_error(constraint, message), KNOWN).codigo is CodigoError.CORREO_DUPLICADO


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("uq_other", None),
        (None, 'duplicate key value violates unique constraint "uq_other_102040"'),
        (None, "duplicate key value"),
        (None, None),
    ],
)
def test_an_unknown_violation_is_error_interno(constraint: str | None, message: str | None) -> None:
    error = translate(_error(constraint, message), KNOWN)
    assert error.codigo is CodigoError.ERROR_INTERNO
