"""The OpenAPI document (gateway/openapi.json, scripts/gen_openapi.py) as served by the
running stack, and schemathesis against the stack with it, every check on (the pytest
equivalent of `schemathesis run --checks all`): no 5xx, every response (status, content
type, headers, body) is one the document allows, every request the document allows is
accepted and every request it refuses is refused, and the key is enforced.

The examples of the document name the demo program's fans, codes and promotions
(src/loyalty_grpc/runtime/cli/demo_fixture.json); this module's program holds the same ones, so
the explicit examples reach the success paths."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import Case
from schemathesis.checks import CHECKS, CheckContext, CheckFunction, load_all_checks
from schemathesis.core.failures import AcceptedNegativeData, FailureGroup
from schemathesis.core.transport import Response
from schemathesis.generation.meta import CoveragePhaseData, CoverageScenario
from schemathesis.openapi.checks import RejectedPositiveData

from loyalty_grpc.api.operation_errors import OPERATION_ERRORS
from loyalty_grpc.domain.amounts import parse_centavos, parse_importe
from loyalty_grpc.domain.errors import CATALOGO, CodigoError, LoyaltyError
from loyalty_grpc.domain.timestamps import parse_ts
from loyalty_grpc.runtime.gateway.config import (
    find_gateway_dir,
)
from tests.e2e.stack import Stack

DOCUMENT = "/api/v1/openapi.json"
PROGRAM = "openapi"
CENTAVOS_FIELDS = ("importe_centavos", "centavos", "amount_cents")


def _demo_program() -> dict[str, Any]:
    text = (resources.files("loyalty_grpc.runtime.cli") / "demo_fixture.json").read_text("utf-8")
    program: dict[str, Any] = json.loads(text)["programas"][0]
    return program


# The committed document, which the first test proves is what the stack serves. Loaded at
# import time, so that `parametrize()` makes one test per operation; the base URL comes
# from the stack when a case is sent.
SCHEMA = schemathesis.openapi.from_path(find_gateway_dir() / "openapi.json")
# The key is the module's own, sent by the test (`ignored_auth` then checks that a call
# without it, or with another, is refused). Generating the Authorization header as well
# would only send random header names (see test_header_names_grpc_cannot_carry); with no
# security parameter generated, `missing_required_header` has nothing to remove (the
# document declares no required header) and passes trivially.
SCHEMA.config.generation.update(with_security_parameters=False, deterministic=True)


# ---------------------------------------------------------------- the checks
#
# Every check schemathesis has (the registry behind `--checks all`), three of them adapted
# to what the contract says and no static JSON Schema can:
#
# - positive_data_acceptance: a request the document allows may still be refused for the
#   server's state or clock, as the document says in words: `id_externo_en_conflicto`
#   (422: that id_externo was used for another sale), `cursor_invalido` (400: `desde`
#   is only valid if this program's feed issued it) and `ts_invalido` for a time more than
#   24 h after the server's clock (400). Any other refusal of valid data fails.
# - negative_data_rejection: `tx` accepts `importe` together with a cents field when both
#   are the same amount (docs/sales.md); the document allows one of them, since equality
#   across fields is not JSON Schema. A body over its operation's limit is refused by the
#   gateway with 413 `solicitud_muy_grande` (documented; schemathesis expects a 400 or
#   422 for a value over its maxLength). Any other acceptance of invalid data fails.
# - unsupported_method: a method the document does not list for a path is 405
#   `metodo_no_permitido` with `Allow` (DESIGN.md §2), as schemathesis expects, except
#   QUERY without a body, which Envoy's HTTP/1 codec refuses before any route (400
#   solicitud_invalida). test_undeclared_methods_are_405 checks every other one directly.
#
# Checks that pass trivially here by nature: use_after_free and
# ensure_resource_availability (stateful: the API has no links, no DELETE and no resource
# path, so `schemathesis run` reports the stateful phase "not applicable");
# object_level_authorization (needs several identities reading objects by id; every read
# here is of the key's own program and nothing is addressed by id); missing_required_header
# (see above). allow_header_conformance now applies: OPTIONS is answered 405 with `Allow`
# listing exactly the methods the document declares for the path. max_response_time is
# not a `--checks` check (it is `--max-response-time`).
load_all_checks()
# (All of them are functions; a class-based check would be a custom one, registered by
# nobody here.)
BUILT_IN: dict[str, CheckFunction] = {
    check.__name__: check for check in CHECKS.get_all() if not isinstance(check, type)
}
# A method schemathesis tries that Envoy's HTTP/1 codec does not always parse (without a
# body it is a malformed request).
CODEC_UNKNOWN_METHODS = {"QUERY"}
FAR_FUTURE = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def _codigo(response: Response) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("codigo") if isinstance(error, dict) else None


def _is_only_in_the_future(value: object) -> bool:
    """A timestamp the server reads, refused only for being ahead of its clock."""
    try:
        parse_ts(value, FAR_FUTURE)  # type: ignore[arg-type]
    except LoyaltyError:
        return False
    return True


def _refused_by_state_or_clock(case: Case[Any], response: Response) -> bool:
    codigo = _codigo(response)
    body = case.body if isinstance(case.body, dict) else {}
    if response.status_code == 422:
        return codigo == CodigoError.ID_EXTERNO_EN_CONFLICTO
    if response.status_code != 400:
        return False
    if codigo == CodigoError.CURSOR_INVALIDO:
        return True
    if codigo == CodigoError.TS_INVALIDO:
        return _is_only_in_the_future(body.get("ts"))
    return False


def _same_amount_twice(case: Case[Any]) -> bool:
    body = case.body
    if case.operation.label != "POST /api/v1/tx" or not isinstance(body, dict):
        return False
    cents = [name for name in CENTAVOS_FIELDS if body.get(name) is not None]
    if body.get("importe") is None or len(cents) != 1:
        return False
    try:
        return parse_importe(body["importe"]) == parse_centavos(body[cents[0]])
    except LoyaltyError:
        return False


def positive_data_acceptance(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    try:
        return BUILT_IN["positive_data_acceptance"](ctx, response, case)
    except RejectedPositiveData:
        if _refused_by_state_or_clock(case, response):
            return None
        raise


def negative_data_rejection(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    try:
        return BUILT_IN["negative_data_rejection"](ctx, response, case)
    except AcceptedNegativeData:
        if _same_amount_twice(case):
            return None
        if response.status_code == 413 and _codigo(response) == CodigoError.SOLICITUD_MUY_GRANDE:
            return None  # the gateway's body limit (api/edge_limits.py)
        raise


def undeclared_method_is_refused(
    ctx: CheckContext, response: Response, case: Case[Any]
) -> bool | None:
    """schemathesis' unsupported_method (405 with `Allow`), except that Envoy's HTTP/1
    codec refuses QUERY (the newest method) as a malformed request before any route when
    it comes without a body: 400 solicitud_invalida, as for any method it does not parse."""
    meta = case.meta
    if (
        meta is not None
        and isinstance(meta.phase.data, CoveragePhaseData)
        and meta.phase.data.scenario == CoverageScenario.UNSPECIFIED_HTTP_METHOD
        and str(response.request.method) in CODEC_UNKNOWN_METHODS
        and response.status_code == 400
        and _codigo(response) == CodigoError.SOLICITUD_INVALIDA
    ):
        return None
    return BUILT_IN["unsupported_method"](ctx, response, case)


ADAPTED: dict[str, CheckFunction] = {
    "positive_data_acceptance": positive_data_acceptance,
    "negative_data_rejection": negative_data_rejection,
    "unsupported_method": undeclared_method_is_refused,
}
CHECKS_RUN: list[CheckFunction] = [ADAPTED.get(name, check) for name, check in BUILT_IN.items()]


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def openapi_key(stack: Stack) -> str:
    demo = _demo_program()
    return stack.program(PROGRAM, fans=demo["fans"], promos=demo["promos"])["todo"]


def test_the_document_is_served_without_a_key(stack: Stack, http: httpx.Client) -> None:
    response = http.get(DOCUMENT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] == "Loyalty Point-of-Sale Integration API v1"
    assert "/api/v1/tx" in document["paths"]
    assert response.content == (find_gateway_dir() / "openapi.json").read_bytes()


def test_every_check_runs() -> None:
    """All of schemathesis' checks, the adapted ones in place of the originals."""
    assert set(BUILT_IN) >= {
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "positive_data_acceptance",
        "negative_data_rejection",
        "missing_required_header",
        "unsupported_method",
        "allow_header_conformance",
        "use_after_free",
        "ensure_resource_availability",
        "ignored_auth",
        "object_level_authorization",
    }
    assert len(CHECKS_RUN) == len(BUILT_IN)
    assert set(ADAPTED.values()) <= set(CHECKS_RUN)
    assert not {BUILT_IN[name] for name in ADAPTED} & set(CHECKS_RUN)


# Examples, coverage (every status/type/boundary variant of each parameter, the undeclared
# methods) and generated cases, valid and invalid; small and reproducible: the module stays
# well under two minutes.
@SCHEMA.parametrize()
@settings(
    max_examples=100,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)
def test_the_api_conforms_to_its_document(case: Case[Any], stack: Stack, openapi_key: str) -> None:
    case.call_and_validate(
        base_url=stack.base_url,
        headers={"Authorization": f"Bearer {openapi_key}"},
        checks=CHECKS_RUN,
        timeout=15,
    )


def _conforms(case: Case[Any], codigo: CodigoError) -> bool:
    """Whether schemathesis' status and body checks take `codigo`'s envelope (with its
    catalogue status) as an answer of the case's operation."""
    operation = case.operation
    response = httpx.Response(
        CATALOGO[codigo].http,
        json={"ok": False, "error": {"codigo": codigo.value, "mensaje": "x"}},
        request=httpx.Request(operation.method.upper(), f"http://127.0.0.1{operation.path}"),
    )
    response.elapsed = timedelta(0)
    checks = [BUILT_IN["status_code_conformance"], BUILT_IN["response_schema_conformance"]]
    try:
        case.validate_response(response, checks=checks)
    except FailureGroup:
        return False
    return True


@pytest.mark.parametrize("method", list(OPERATION_ERRORS))
def test_the_checks_hold_each_operation_to_its_own_codigos(method: str) -> None:
    """What makes the run above tie api/operation_errors.py to the real answers: for each
    operation, schemathesis' checks take an envelope with any of its codigos and refuse
    one with any other codigo of the HTTP API (POST /api/v1/ping answering 404
    codigo_no_encontrado, or fan/resolve answering 404 codigo_no_encontrado, fails)."""
    (path, verb) = next(
        (path, verb)
        for path, operations in SCHEMA.raw_schema["paths"].items()
        for verb, operation in operations.items()
        if operation["operationId"] == method
    )
    case = SCHEMA[path][verb.upper()].Case()
    for codigo, entrada in CATALOGO.items():
        if entrada.interno:
            continue
        expected = codigo in OPERATION_ERRORS[method]
        assert _conforms(case, codigo) is expected, (method, codigo.value)


UNDECLARED = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "HEAD"]


def test_undeclared_methods_are_405(stack: Stack, http: httpx.Client, openapi_key: str) -> None:
    """Every method the document does not list for one of its paths: 405
    metodo_no_permitido, `Allow` listing exactly the methods it does list (what
    schemathesis' unsupported_method and allow_header_conformance check)."""
    document = json.loads((find_gateway_dir() / "openapi.json").read_bytes())
    for path, operations in document["paths"].items():
        declared = sorted(method.upper() for method in operations)
        for method in sorted(set(UNDECLARED) - set(declared)):
            response = http.request(
                method, path, headers={"Authorization": f"Bearer {openapi_key}"}
            )
            assert response.status_code == 405, (method, path, response.text)
            assert response.headers["allow"] == ", ".join(declared)
            if method != "HEAD":
                assert response.json()["error"]["codigo"] == CodigoError.METODO_NO_PERMITIDO


# Found by schemathesis (negative Authorization headers come with random header names):
# the transcoder forwards every request header as gRPC metadata; a name gRPC cannot carry
# (it allows only [0-9a-z_.-]) or an invalid reserved grpc-* header made grpc-core reject
# the call (500 error_interno). envelope.lua now drops such headers before the transcoder.
@pytest.mark.parametrize("header", [("x|y", "1"), ("a`b", "1"), ("^a", ""), ("grpc-timeout", "zz")])
def test_header_names_grpc_cannot_carry(
    stack: Stack, http: httpx.Client, openapi_key: str, header: tuple[str, str]
) -> None:
    response = http.get(
        "/api/v1/ping", headers={"Authorization": f"Bearer {openapi_key}", header[0]: header[1]}
    )
    assert response.status_code == 200, response.text
