"""The table of which codigos each PosService operation answers (api/operation_errors.py)
against the code it describes: the service's methods, the permission table, the
catalogue, what the gateway and the server's interceptors send to any call, and the
proto's rpc comments. (The OpenAPI document follows it: tests/unit/test_openapi_document.py;
the real stack's answers are checked against the document's per-operation enums by
schemathesis: tests/e2e/test_openapi_schemathesis.py.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from loyalty_grpc.api.operation_errors import EDGE, NOT_AN_OPERATIONS_ANSWER, OPERATION_ERRORS
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.domain.permissions import REQUIRED
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from tests.unit.test_catalogue_reachable import SRC, named_in, named_in_lua

ROOT = Path(__file__).resolve().parents[2]
SERVICE = pb.DESCRIPTOR.services_by_name["PosService"]
HTTP_API = {codigo for codigo, entrada in CATALOGO.items() if not entrada.interno}
# The server's parts every call goes through, whatever its operation.
EVERY_CALL = [
    SRC / "api" / name
    for name in ("authentication.py", "call_limit.py", "failures.py", "interceptors.py")
]


def test_one_row_per_method_of_the_service() -> None:
    assert list(OPERATION_ERRORS) == [method.name for method in SERVICE.methods]


def test_only_the_http_apis_codigos_and_each_is_someones_answer() -> None:
    """No back-office codigo; every codigo of the HTTP API is some operation's answer or
    the answer of a route itself (an unknown path, a method the path does not take)."""
    answered = set().union(*OPERATION_ERRORS.values())
    assert answered <= HTTP_API
    assert not answered & NOT_AN_OPERATIONS_ANSWER
    assert answered | NOT_AN_OPERATIONS_ANSWER == HTTP_API


@pytest.mark.parametrize("method", list(OPERATION_ERRORS))
def test_permiso_denegado_exactly_where_a_permission_is_needed(method: str) -> None:
    needs_one = REQUIRED[method] is not None
    assert (CodigoError.PERMISO_DENEGADO in OPERATION_ERRORS[method]) is needs_one
    assert OPERATION_ERRORS[method] >= EDGE


def test_what_any_call_can_get_is_in_every_operations_row() -> None:
    """What the gateway's Lua and the server's interceptors send are in EDGE, but for
    permiso_denegado (by operation), the answers of routes, and demasiados_codigos (the
    gateway's refusal of a list of codes: only operations that take one)."""
    by_operation = {CodigoError.PERMISO_DENEGADO, CodigoError.DEMASIADOS_CODIGOS}
    sent = named_in(EVERY_CALL, skip_fakes=False, exclude=set()) | named_in_lua()
    assert sent - by_operation - NOT_AN_OPERATIONS_ANSWER <= EDGE
    assert sent >= EDGE
    takes_codes = {
        method.name
        for method in SERVICE.methods
        if any(field.name in ("codigos", "codigos_lista") for field in method.input_type.fields)
    }
    assert takes_codes == {"Redeem", "DepositCodes"}
    for name in takes_codes:
        assert CodigoError.DEMASIADOS_CODIGOS in OPERATION_ERRORS[name]


def _proto_comments() -> dict[str, str]:
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.append(scripts)
    from proto_comments import comments  # (a script's sibling module)

    found: dict[str, str] = comments()
    return found


@pytest.mark.parametrize("method", list(OPERATION_ERRORS))
def test_the_rpc_comment_names_only_the_operations_codigos(method: str) -> None:
    """pos_service.proto's comment of each rpc (its "Errors: …") names only codigos the
    operation can answer (the table is the complete list; the comment its own ones)."""
    comment = _proto_comments()[f"{SERVICE.full_name}.{method}"]
    values = {codigo.value: codigo for codigo in CodigoError}
    named = {values[word] for word in re.findall(r"[a-z_]+", comment) if word in values}
    assert named <= OPERATION_ERRORS[method], sorted(named - OPERATION_ERRORS[method])
