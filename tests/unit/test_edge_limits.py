"""api/edge_limits.py: each binding's body limit holds the largest body the domain allows,
written as a JSON encoder would at its worst (every text escaped, pretty-printed), and the
figures quoted elsewhere (the catalogue, the codes' refusal) are the module's."""

from __future__ import annotations

import json

import pytest
from google.api import annotations_pb2

from loyalty_grpc.api import edge_limits
from loyalty_grpc.api.edge_limits import BINDINGS, FLOOR, MAX_DEPTH, MAX_MEMBERS
from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain import amounts, keys, timestamps
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL, too_many_codes
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.promos import MAX_NOMBRE
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.domain.roster_cursor import CURSOR_LENGTH
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

# A text at its largest, every character escaped by ensure_ascii as a surrogate pair
# (12 bytes); a code at its largest, every character escaped with a backslash (2 bytes).
TEXT = "\U0001f600"
CODE = '"'
BIGGEST_NUMBER = -1.7976931348623157e308


def text(chars: int) -> str:
    return TEXT * chars


def code() -> str:
    return CODE * MAX_CODE_LENGTH


WORST = {
    "POST /api/v1/tx": {
        "id_externo": text(MAX_ID_EXTERNO),
        "fan": text(MAX_FAN_TEXT),
        "importe": text(amounts.MAX_TEXTO),
        "importe_centavos": BIGGEST_NUMBER,
        "terminal": text(MAX_LABEL),
        "sitio": text(MAX_LABEL),
        "ts": text(timestamps.MAX_TEXTO),
        "moneda": text(edge_limits.MAX_MONEDA),
    },
    "POST /api/v1/fan/resolve": {"fan": text(MAX_FAN_TEXT)},
    "POST /api/v1/redeem": {
        "codigos": [code()] * MAX_CODIGOS,
        "terminal": text(MAX_LABEL),
        "ts": text(timestamps.MAX_TEXTO),
    },
    "POST /api/v1/codes": {
        "promo": text(MAX_NOMBRE),
        "codigos": [code()] * MAX_CODES_PER_CALL,
    },
    "POST /api/v1/ping": {},
    "POST /api/v1/roster": {"desde": "A" * CURSOR_LENGTH, "limite": BIGGEST_NUMBER},
}


@pytest.mark.parametrize("binding", list(WORST))
@pytest.mark.parametrize("indent", [None, 4, "\t\t"])
def test_the_largest_body_fits_its_limit(binding: str, indent: int | str | None) -> None:
    body = json.dumps(WORST[binding], ensure_ascii=True, indent=indent).encode()
    assert len(body) <= BINDINGS[binding].worst_case() <= BINDINGS[binding].limit


def test_the_codes_text_form_fits_too() -> None:
    pasted = "\r\n".join([code()] * MAX_CODES_PER_CALL)
    body = json.dumps({"promo": text(MAX_NOMBRE), "codigos": pasted}).encode()
    assert len(body) <= BINDINGS["POST /api/v1/codes"].limit


def test_limits_are_whole_pages_at_least_the_floor() -> None:
    for name, binding in BINDINGS.items():
        if binding.body:
            assert binding.limit % edge_limits.PAGE == 0, name
            assert binding.limit >= max(FLOOR, binding.worst_case()), name
            assert binding.limit - binding.worst_case() < edge_limits.PAGE or (
                binding.limit == FLOOR
            ), name
        else:
            assert binding.limit == 0, name
        assert binding.buffer_limit >= FLOOR, name


def test_every_binding_of_the_proto_has_limits() -> None:
    service = pos_service_pb2.DESCRIPTOR.services_by_name["PosService"]
    bound = set()
    for method in service.methods:
        rule = method.GetOptions().Extensions[annotations_pb2.http]
        verb = rule.WhichOneof("pattern")
        bound.add(f"{verb.upper()} {getattr(rule, verb)}")
        fields = len(method.input_type.fields)
        assert fields <= MAX_MEMBERS // 2, method.name  # room for unknown fields
    assert bound == set(BINDINGS)
    for name, binding in BINDINGS.items():
        assert binding.body == name.startswith("POST "), name


def test_parse_limits_fit_the_messages() -> None:
    # The deepest request: the body object and a list of codes.
    assert MAX_DEPTH >= 2
    assert BINDINGS["POST /api/v1/codes"].max_elements == MAX_CODES_PER_CALL
    assert BINDINGS["POST /api/v1/redeem"].max_elements == MAX_CODIGOS


def test_the_catalogue_quotes_the_limits() -> None:
    cuando = CATALOGO[CodigoError.SOLICITUD_MUY_GRANDE].cuando
    for name, figure in [
        ("tx", BINDINGS["POST /api/v1/tx"].limit),
        ("fan/resolve", BINDINGS["POST /api/v1/fan/resolve"].limit),
        ("redeem", BINDINGS["POST /api/v1/redeem"].limit),
        ("codes", BINDINGS["POST /api/v1/codes"].limit),
    ]:
        assert f"{name} {figure}" in cuando
    assert f"ping and roster {BINDINGS['POST /api/v1/ping'].limit}" in cuando
    assert BINDINGS["POST /api/v1/roster"].limit == BINDINGS["POST /api/v1/ping"].limit
    assert f"more than {MAX_MEMBERS} members" in cuando


def test_refusal_texts_name_the_operation_and_its_limit() -> None:
    assert edge_limits.too_large("POST /api/v1/tx") == (
        "POST /api/v1/tx: el cuerpo pasa de 12288 bytes, lo más que admite esta operación"
    )
    assert edge_limits.too_large("GET /api/v1/ping") == edge_limits.no_body("GET /api/v1/ping")
    assert too_many_codes("codigos", 500) == (
        "codigos: más de 500 códigos en una llamada; envíelos en varias"
    )


def test_the_key_shape_the_gateway_copies() -> None:
    """envelope.lua checks a prefix of keys.PREFIJOS and MIN_SECRET_LENGTH letters or
    digits: the same as keys.mode_of."""
    for modo, prefix in keys.PREFIJOS.items():
        assert keys.mode_of(prefix + "a" * keys.MIN_SECRET_LENGTH) is modo
        assert keys.mode_of(prefix + "a" * (keys.MIN_SECRET_LENGTH - 1)) is None
        assert keys.mode_of(prefix + "a" * keys.MIN_SECRET_LENGTH + "-") is None
