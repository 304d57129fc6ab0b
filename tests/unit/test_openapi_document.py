"""gateway/openapi.json (scripts/gen_openapi.py; tests/integration/test_generated_fresh.py
proves it is what the script writes): a valid OpenAPI 3.1 document, examples that name the
demo program, request schemas that accept exactly what the server's parsers accept, and
shapes client generators can type. tests/e2e/test_openapi_schemathesis.py runs it against the
stack."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.definitions import OPENAPI_31

from loyalty_grpc.api.native_fields import native_fields
from loyalty_grpc.api.operation_errors import NOT_AN_OPERATIONS_ANSWER, OPERATION_ERRORS
from loyalty_grpc.domain.amounts import parse_importe
from loyalty_grpc.domain.ascii import ascii_upper
from loyalty_grpc.domain.codes import code_batch_of_json
from loyalty_grpc.domain.errors import CATALOGO, CodigoError, LoyaltyError
from loyalty_grpc.domain.fixture import parse_fixture
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan
from loyalty_grpc.domain.redeem import _ERRORES
from loyalty_grpc.domain.text import single_line
from loyalty_grpc.domain.timestamps import parse_ts
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT: dict[str, Any] = json.loads((ROOT / "gateway" / "openapi.json").read_text("utf-8"))
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
FAR_FUTURE = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
PROPERTY_SETTINGS = settings(max_examples=600, derandomize=True, deadline=None, database=None)


def _load_generator() -> ModuleType:
    """scripts/gen_openapi.py as a module; it imports its sibling scripts as a script
    does (proto_comments, gen_proto), so their folder is on the path while it loads."""
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.append(scripts)
    spec = importlib.util.spec_from_file_location(
        "gen_openapi", ROOT / "scripts" / "gen_openapi.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()


def _validator(name: str) -> jsonschema_rs.Validator:
    """A JSON Schema (2020-12) validator for components/schemas/<name> of the document."""
    return jsonschema_rs.validator_for(
        {"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]}
    )


def _schemas(node: object) -> Iterator[dict[str, Any]]:
    """Every Schema Object of the document (where OpenAPI puts one)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema" and isinstance(value, dict):
                yield value
            elif key == "schemas" and isinstance(value, dict):
                yield from value.values()
            else:
                yield from _schemas(value)
    elif isinstance(node, list):
        for item in node:
            yield from _schemas(item)


def _patterns(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from _patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item)


# ---------------------------------------------------------------- the document


def test_the_document_is_valid_openapi_3_1() -> None:
    jsonschema_rs.validator_for(OPENAPI_31).validate(DOCUMENT)
    for schema in _schemas(DOCUMENT):
        jsonschema_rs.meta.validate(schema)
    # Every pattern compiles in Python and in an ECMA-262 engine (jsonschema-rs).
    for pattern in set(_patterns(DOCUMENT)):
        re.compile(pattern)
        jsonschema_rs.validator_for({"pattern": pattern})


def test_bodies_are_required_only_where_a_field_must_be_sent() -> None:
    required = {
        path: operation["requestBody"]["required"]
        for path, item in DOCUMENT["paths"].items()
        for verb, operation in item.items()
        if verb == "post"
    }
    assert required == {
        "/api/v1/ping": False,
        "/api/v1/roster": False,
        "/api/v1/fan/resolve": True,
        "/api/v1/tx": True,
        "/api/v1/redeem": True,
        "/api/v1/codes": True,
    }


def test_redeem_data_is_one_of_two_complete_objects() -> None:
    """openapi-python-client types a oneOf of named objects (it fell back to Any for the
    properties+oneOf shape); each form still validates exactly."""
    assert SCHEMAS["RedeemData"] == {
        "oneOf": [
            {"$ref": "#/components/schemas/RedeemSingleData"},
            {"$ref": "#/components/schemas/RedeemBatchData"},
        ]
    }
    single = {
        "codigo": "HD-0003",
        "estado": "canjeado",
        "duplicado": False,
        "promo": "2x1 Hot Dog",
        "fan": {"correo": "maria.lopez@example.com"},
        "puntos_otorgados": 50,
        "puntos_acreditados": 50,
    }
    batch = {
        "resumen": {"recibidos": 2, "canjeados": 1, "duplicados": 0, "rechazados": 1},
        "resultados": [
            {**single, "ok": True},
            {
                "codigo": "NADA",
                "ok": False,
                "error": {"codigo": "codigo_no_encontrado", "mensaje": "No se encontró."},
            },
        ],
    }
    validator = _validator("RedeemData")
    assert validator.is_valid(single)
    assert validator.is_valid(batch)
    assert not validator.is_valid({**single, "resumen": batch["resumen"]})
    assert not validator.is_valid({**batch, "codigo": "HD-0003"})
    assert not validator.is_valid({k: v for k, v in single.items() if k != "promo"})
    assert not validator.is_valid({k: v for k, v in single.items() if k != "puntos_acreditados"})
    entries = batch["resultados"]
    assert isinstance(entries, list)
    assert not validator.is_valid({**batch, "resultados": [{**entries[0], "ok": False}]})
    entry_errors = SCHEMAS["RedeemBatchEntryError"]["properties"]["error"]["properties"]
    assert set(entry_errors["codigo"]["enum"]) == {c.value for c in _ERRORES.values()}


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"fan": "DEMO0001"}, True),
        ({"fan": "DEMO0001", "qr": ""}, True),
        ({"fan": "DEMO0001", "qr": "  ", "codigo": None}, True),
        ({"fan": None, "fan_id": "DEMO0001"}, True),
        ({"fan": "DEMO0001", "qr": "qMfL7x2Kp9"}, False),
        ({"fan": ""}, False),
        ({"fan": " \t"}, False),
        ({"fan": "\x1e\x1f"}, False),  # Python's strip() takes them: blank
        ({"fan": "DEMO\x000001"}, False),
        ({}, False),
        ({"fan": 12345}, False),
        ({"fan": "DEMO0001", "": 1}, False),
        ({"fan": "DEMO0001", "otro": [1, {"": None}]}, True),
    ],
)
def test_exactly_one_fan_field(body: dict[str, object], valid: bool) -> None:
    assert _validator("ResolveFanRequest").is_valid(body) is valid


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": "1,234.50"}, True),
        ({"id": "V-1", "qr": "qMfL7x2Kp9", "importe_centavos": 123450}, True),
        ({"tx_id": "V-1", "fan_id": "DEMO0001", "amount_cents": 1250.0, "caja": "3"}, True),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "ts": 1795295812}, True),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "ts": "2026-11-21 21:16"}, True),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "ts": ""}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "ts": "2026-11-21"}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "ts": 1e5}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe_centavos": "1250"}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "centavos": 500}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 12.345}, False),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": ""}, False),
        ({"id_externo": "", "fan": "DEMO0001", "importe": 5}, False),
        ({"id_externo": "V-1", "id": "V-2", "fan": "DEMO0001", "importe": 5}, False),
        (
            {"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "terminal": "1", "caja": "2"},
            False,
        ),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "terminal": "1", "caja": ""}, True),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "moneda": " mxn "}, True),
        ({"id_externo": "V-1", "fan": "DEMO0001", "importe": 5, "moneda": "USD"}, False),
    ],
)
def test_register_tx_bodies(body: dict[str, object], valid: bool) -> None:
    assert _validator("RegisterTxRequest").is_valid(body) is valid


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"codigo": "HD-0003"}, True),
        ({"codigo": "HD-0003", "codigos": []}, True),
        ({"codigos": ["HD-0003", ""]}, True),
        ({"codigo": " ", "codigos": ["HD-0003"]}, True),
        ({"codigo": "HD-0003", "codigos": ["HD-0004"]}, False),
        ({"codigos": []}, False),
        ({"codigos": ["x"] * 501}, False),
        ({"codigos": "HD-0003"}, False),
    ],
)
def test_redeem_bodies(body: dict[str, object], valid: bool) -> None:
    assert _validator("RedeemRequest").is_valid(body) is valid


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"promo": "2x1 Hot Dog", "codigos": ["HD-0001"]}, True),
        ({"promo_id": 1, "codes": "HD-0001, HD-0002;HD-0003"}, True),
        ({"promo": "", "promo_id": "1", "codigos": "A", "codes": None}, True),
        ({"promo": 1.5, "codigos": ["A"]}, False),
        ({"promo": 1, "codigos": []}, False),
        ({"promo": 1, "codigos": ",;"}, False),
        ({"promo": 1, "codigos": ["A B"]}, False),
        ({"promo": 1, "codigos": ["A" * 65]}, False),
        ({"promo": 1, "codigos": [], "codes": "A"}, False),
    ],
)
def test_deposit_bodies(body: dict[str, object], valid: bool) -> None:
    assert _validator("DepositCodesRequest").is_valid(body) is valid


# ---------------------------------------------------------------- examples


def test_examples_name_the_demo_program() -> None:
    """Every fan, code and promotion an example names is in the demo fixture, so each
    explicit example reaches a success path on `up --demo` (and in the e2e test)."""
    text = (ROOT / "src" / "loyalty_grpc" / "runtime" / "cli" / "demo_fixture.json").read_text(
        "utf-8"
    )
    programa = parse_fixture(text).programas[0]
    fans = {f.fan_id: f for f in programa.fans if f.estado is EstadoFan.ACTIVO}
    codes = {c.codigo: c for p in programa.promos for c in p.codigos}
    by_reference: dict[str, str] = {}
    for fan in fans.values():
        by_reference |= {fan.fan_id: fan.fan_id, fan.correo: fan.fan_id}
        by_reference[fan.qr_token] = fan.fan_id
        by_reference[f"{programa.qr_url.rstrip('/')}/v/{fan.qr_token}"] = fan.fan_id
    for code in codes.values():
        delivered = code.estado in (EstadoCodigo.ASIGNADO, EstadoCodigo.CANJEADO)
        if delivered and code.fan in fans:
            by_reference[code.codigo] = str(code.fan)
    promos = {p.nombre: p for p in programa.promos}

    seen = 0
    for path, item in DOCUMENT["paths"].items():
        for operation in item.values():
            media = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if media is None or "examples" not in media:
                continue
            name = media["schema"]["$ref"].rsplit("/", 1)[-1]
            for example in media["examples"].values():
                body = example["value"]
                seen += 1
                assert _validator(name).is_valid(body), (path, body)
                for field in ("fan", "fan_id", "qr"):
                    if field in body:
                        assert body[field] in by_reference, (path, body)
                if path in ("/api/v1/fan/resolve", "/api/v1/tx") and "codigo" in body:
                    assert body["codigo"] in by_reference, (path, body)
                if path == "/api/v1/redeem":
                    for code in [body.get("codigo"), *body.get("codigos", [])]:
                        assert code is None or code in codes, (path, body)
                if path == "/api/v1/codes":
                    promo = promos[body["promo"]]
                    own = {c.codigo for c in promo.codigos}
                    listed = body.get("codigos") or re.split(r"[\s,;]+", body["codes"])
                    assert set(listed) <= own, (path, body)
    assert seen >= 10


def test_success_examples_are_valid_answers_and_a_retry_keeps_what_was_credited() -> None:
    """The 200 examples of tx and redeem validate against their schemas; the retry's
    answer is the first one with `duplicado`, 0 `puntos_otorgados` and the same
    `puntos_acreditados` (issue 23 §2), and the fields say so."""
    seen = 0
    for path in ("/api/v1/tx", "/api/v1/redeem"):
        media = DOCUMENT["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]
        validator = jsonschema_rs.validator_for(
            {**media["schema"], "components": DOCUMENT["components"]}
        )
        first, retry = media["examples"]["first"]["value"], media["examples"]["retry"]["value"]
        for example in (first, retry):
            assert validator.is_valid(example), (path, example)
            seen += 1
        assert first["data"]["puntos_acreditados"] == first["data"]["puntos_otorgados"] > 0
        assert retry["data"] == {
            **first["data"],
            "duplicado": True,
            "puntos_otorgados": 0,
        }
    assert seen == 4
    for name in ("RegisterTxData", "RedeemSingleData", "RedeemBatchEntryOk"):
        field = SCHEMAS[name]["properties"]["puntos_acreditados"]
        assert field["type"] == "integer"
        assert "duplicado" in field["description"]
        assert "puntos_acreditados" in SCHEMAS[name]["required"]


# ---------------------------------------------------------------- patterns vs parsers


def _agree(pattern: str, accepts: Callable[[str], bool], text: str) -> None:
    """`pattern` (in Python's engine and in an ECMA-262 one) matches `text` exactly when
    the server's parser accepts it."""
    expected = accepts(text)
    assert (re.search(pattern, text) is not None) is expected, (text, expected)
    assert jsonschema_rs.validator_for({"pattern": pattern}).is_valid(text) is expected, text


def _raises_nothing(parse: Callable[[], object]) -> bool:
    try:
        parse()
    except LoyaltyError:
        return False
    return True


SPACES = st.sampled_from([" ", "\t", "\n", "\x1c", "\x1f", "\x85", "\u00a0", "\u202f", "\u3000"])
ODD = st.sampled_from(["\x00", "\x01", "\x7f", "\x9f", "\ufeff", "é", ",", ";", "ß", "-", "A"])
# Any character a JSON text can carry (not a lone surrogate).
CHARACTERS = st.characters(exclude_categories=["Cs"])
TEXT = st.one_of(
    st.text(SPACES, max_size=4),
    st.text(SPACES | ODD, max_size=8),
    st.text(CHARACTERS, max_size=12),
    st.tuples(
        st.text(SPACES, max_size=2),
        st.text(ODD | CHARACTERS, max_size=6),
        st.text(SPACES, max_size=2),
    ).map("".join),
)


@st.composite
def amount_texts(draw: st.DrawFn) -> str:
    """Digits in groups of 1-4 joined by `.` and `,`, with the currencies, signs and
    spaces the parser knows about (and some it refuses)."""
    groups = draw(st.lists(st.text("0123456789", min_size=1, max_size=4), min_size=1, max_size=4))
    number = groups[0] + "".join(draw(st.sampled_from(".,")) + group for group in groups[1:])
    before = draw(
        st.sampled_from(["", "", "$", "MX$ ", "mxn", "$\u00a0", "-", "$-", "+", " ", "€"])
    )
    after = draw(st.sampled_from(["", "", " MXN", "mxn", "\u202fMXN", "\t", " USD", "."]))
    return before + number + after


def _iso_before_the_pattern(text: str) -> bool:
    """The pattern starts on 2000-01-02 (a local time on 2000-01-01 may fall before
    MIN_TS): the server accepts some earlier ISO texts the pattern does not."""
    return text.strip()[:10] <= "2000-01-01"


# Boundaries of each rule (docs/sales.md "Amounts and timestamps"), tried first.
AMOUNTS = [
    *["100", "12.5", "0", "0.50", "0001234", "000000001", "12,5", "12.50", "1,234", "1.234"],
    *["12.345", "1.234.567", "1,234.56", "1.234,56", "1,234,567.89", "1.234.567,89", "$1234"],
    *["$ 1,234.56", "MX$ 99.90", "MXN 1.234,56", "1,234.56 MXN", "$5 MXN", "mx$7", "-0"],
    *["$\u00a0100", "1234,56\u00a0MXN", "MX$\u202f99.90", "$-0.00", "- $ 0", "-0,00", "$\t100"],
    *["9,999,999.99", "10,000,000", "10.000.000,00", "10000000.0", "10000000.5", "12345678"],
    *["10,000,000.01", "1234.567", "0,123", "01,234", "1,2.34", "1,234.567", "1,234,567.890"],
    *["1.234,567.89", "1,234.5.6", ".5", "5.", "1 234", "+5", "-5", "USD 100", "€5", "5 pesos"],
    *["1\u202f234,56", "$", "MXN", "", " ", "$$5", "MX$MXN5", "1e3", "0x10", "１２"],
]
TIMESTAMPS = [
    *["2026-11-21T15:16:52-06:00", "2026-11-21T15:16:52-0600", "2026-11-21T15:16:52-06"],
    *[
        "2026-11-21T21:16:52Z",
        "2026-11-21t21:16:52.123z",
        "2026-11-21 21:16:52",
        "2026-11-21T21:16",
    ],
    *["2026-11-21T21:16:52,123456789", "2026-11-21T21:16:52.1234567891", "2026-11-21T21:16:5"],
    *["2024-02-29T00:00Z", "2023-02-29T00:00Z", "2100-02-29T00:00", "2000-02-29 12:00"],
    *["2400-02-29T00:00", "2026-04-31T00:00", "2026-04-30T00:00", "2026-13-01T00:00"],
    *["2026-00-10T00:00", "2026-11-00T00:00", "2026-11-21T24:00", "2026-11-21T23:60"],
    *[
        "2026-11-21T23:59:60",
        "2026-11-21T23:59+24:00",
        "2026-11-21T23:59+23:60",
        "2026-11-21T23:59+2359",
    ],
    *[
        "2026-11-21",
        "2026-11-21T23",
        "20261121T231600Z",
        "1999-12-31T23:59Z",
        "2000-01-02T00:00+23:59",
    ],
    *[
        "0999-01-01T00:00",
        "9999-12-31T23:59:59.999999Z",
        " 2026-11-21T21:16Z\n",
        "2026-11-21T21:16 Z",
    ],
    *["946684800", "946684799", "0946684800", "99999999999", "99999999999.99", "100000000000"],
    *["946684799999", "946684800000", "253402300799999", "253402300799999.9", "253402300800000"],
    *["-946684800", "+946684800", "1e10", "946684800.", ".5", "1795295812", " 1795295812000 "],
]


@pytest.mark.parametrize("text", AMOUNTS)
def test_the_amount_pattern_at_the_boundaries(text: str) -> None:
    _agree(GEN.IMPORTE_TEXT, lambda t: _raises_nothing(lambda: parse_importe(t)), text)


@pytest.mark.parametrize("text", TIMESTAMPS)
def test_the_timestamp_pattern_at_the_boundaries(text: str) -> None:
    def accepts(t: str) -> bool:
        return _raises_nothing(lambda: parse_ts(t, FAR_FUTURE))

    if accepts(text) and _iso_before_the_pattern(text):
        return
    _agree(GEN.TS_TEXT, accepts, text)


@PROPERTY_SETTINGS
@given(st.one_of(amount_texts(), TEXT))
def test_the_amount_pattern_is_the_amount_parser(text: str) -> None:
    _agree(GEN.IMPORTE_TEXT, lambda t: _raises_nothing(lambda: parse_importe(t)), text)


@st.composite
def iso_texts(draw: st.DrawFn) -> str:
    """Dates and times near every boundary of the ISO 8601 rules."""
    year = draw(st.sampled_from([1999, 2000, 2001, 2023, 2024, 2100, 2400]) | st.integers(0, 9999))
    month = draw(st.integers(0, 13))
    day = draw(st.sampled_from([0, 1, 28, 29, 30, 31, 32]) | st.integers(1, 31))
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if draw(st.integers(0, 9)) > 0:
        text += draw(st.sampled_from("Tt x")) + f"{draw(st.integers(0, 25)):02d}:"
        text += f"{draw(st.integers(0, 61)):02d}"
        if draw(st.booleans()):
            text += f":{draw(st.integers(0, 61)):02d}"
            if draw(st.booleans()):
                text += draw(st.sampled_from(".,")) + draw(st.text("0123456789", max_size=10))
        zone = draw(st.sampled_from(["", "Z", "z", "+", "-"]))
        if zone in ("+", "-"):
            zone += f"{draw(st.integers(0, 25)):02d}"
            if draw(st.booleans()):
                zone += draw(st.sampled_from(["", ":"])) + f"{draw(st.integers(0, 61)):02d}"
        text += zone
    return draw(st.sampled_from(["", " ", "\t"])) + text + draw(st.sampled_from(["", "\n"]))


@PROPERTY_SETTINGS
@given(
    st.one_of(
        iso_texts(),
        st.from_regex(r"[ ]?-?0{0,3}[0-9]{1,16}(\.[0-9]{0,16})?\n?", fullmatch=True),
        TEXT,
    )
)
def test_the_timestamp_pattern_is_the_timestamp_parser(text: str) -> None:
    def accepts(t: str) -> bool:
        return _raises_nothing(lambda: parse_ts(t, FAR_FUTURE))

    if accepts(text) and _iso_before_the_pattern(text):
        return
    _agree(GEN.TS_TEXT, accepts, text)


@PROPERTY_SETTINGS
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-(10**16), max_value=10**16)
)
def test_the_timestamp_numbers_are_the_timestamp_parser(number: float) -> None:
    accepted = _raises_nothing(lambda: parse_ts(number, FAR_FUTURE))
    schema = {"anyOf": [GEN.TS_NUMBER_SECONDS, GEN.TS_NUMBER_MS]}
    in_schema = jsonschema_rs.validator_for(schema).is_valid(number)
    assert in_schema is accepted, number


def _padded(core: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.text(SPACES, max_size=2), core, st.text(SPACES, max_size=2)).map("".join)


@PROPERTY_SETTINGS
@given(
    st.one_of(
        TEXT,
        _padded(st.integers(90, 130).map(lambda n: "x" * n)),
        _padded(st.text(CHARACTERS, min_size=95, max_size=130)),
    )
)
def test_the_single_line_patterns_are_the_text_rules(text: str) -> None:
    _agree(
        GEN.LABEL,
        lambda t: (
            _raises_nothing(lambda: single_line(t, "terminal", max_length=100)) or not t.strip()
        ),
        text,
    )
    _agree(
        GEN.ID_EXTERNO,
        lambda t: _raises_nothing(lambda: single_line(t, "id_externo", max_length=128)),
        text,
    )
    _agree(GEN.BLANK, lambda t: not t.strip(), text)
    _agree(GEN.SOME_TEXT, lambda t: bool(t.strip()) and "\x00" not in t, text)
    _agree(GEN.MONEDA, lambda t: ascii_upper(t.strip() or "MXN") == "MXN", text)


@PROPERTY_SETTINGS
@given(
    st.one_of(
        TEXT,
        _padded(st.integers(60, 70).map(lambda n: "C" * n)),
        st.lists(st.from_regex(r"[A-Za-z0-9-]{1,4}", fullmatch=True), max_size=4).map(", ".join),
    )
)
def test_the_code_patterns_are_the_code_rules(text: str) -> None:
    _agree(GEN.CODE_ITEM, lambda t: _raises_nothing(lambda: code_batch_of_json([t])), text)
    if text.strip():
        _agree(GEN.CODES_TEXT, lambda t: _raises_nothing(lambda: code_batch_of_json(t)), text)


@pytest.mark.parametrize(
    ("low", "high"), [(1, 9), (7, 123), (2001, 9999), (946684800, 10**11 - 1), (99, 100)]
)
def test_integer_ranges(low: int, high: int) -> None:
    pattern = re.compile(GEN.integer_range(low, high))
    for number in range(max(0, low - 50), low + 500):
        assert (pattern.fullmatch(str(number)) is not None) is (low <= number <= high)
    for number in range(max(0, high - 500), high + 50):
        assert (pattern.fullmatch(str(number)) is not None) is (low <= number <= high)


def test_native_only_fields_are_not_in_the_document():
    """The fields for native gRPC callers only (`nativo_de`) and the messages only they use
    are not part of the JSON API: no schema names them."""
    names = {
        field.name
        for message in pb.DESCRIPTOR.message_types_by_name.values()
        for field in native_fields(message)
    }
    assert names
    properties: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            properties.update(value.get("properties", {}))
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(DOCUMENT)
    assert not names & properties
    assert not {"PromoActual", "RedeemResultados", "RedeemResultado"} & set(SCHEMAS)


def _error_codigos(response: dict[str, Any]) -> list[str]:
    """The `error.codigo` enum of an error response (a `$ref` to components/responses or
    the operation's own)."""
    ref = response.get("$ref")
    if isinstance(ref, str):
        response = DOCUMENT["components"]["responses"][ref.rsplit("/", 1)[-1]]
    schema = response["content"]["application/json"]["schema"]
    assert schema["allOf"] == [{"$ref": "#/components/schemas/ErrorEnvelope"}]
    codigos: list[str] = schema["properties"]["error"]["properties"]["codigo"]["enum"]
    lines = response["description"].splitlines()
    assert lines == [f"- `{c}`: {CATALOGO[CodigoError(c)].cuando}" for c in codigos]
    return codigos


def test_each_operation_lists_its_own_codigos() -> None:
    """Each operation's error responses are the statuses of the codigos it can answer
    (api/operation_errors.py), each with exactly those of its codigos that have the
    status: POST /api/v1/ping does not offer 404 codigo_no_encontrado."""
    for methods in DOCUMENT["paths"].values():
        for operation in methods.values():
            listed: set[str] = set()
            for status, response in operation["responses"].items():
                if status == "200":
                    continue
                codigos = _error_codigos(response)
                assert {CATALOGO[CodigoError(c)].http for c in codigos} == {int(status)}
                listed |= set(codigos)
            expected = OPERATION_ERRORS[operation["operationId"]]
            assert listed == {c.value for c in expected}, operation["operationId"]


def test_the_routes_own_answers_stay_documented() -> None:
    """ruta_no_encontrada and metodo_no_permitido are no operation's answer; the document
    keeps them in components/responses."""
    documented = {
        codigo
        for response in DOCUMENT["components"]["responses"].values()
        for codigo in _error_codigos(response)
    }
    assert documented >= {c.value for c in NOT_AN_OPERATIONS_ANSWER}
