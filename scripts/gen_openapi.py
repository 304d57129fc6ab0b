"""Generate gateway/openapi.json, the OpenAPI 3.1 document of the JSON API, from its single
sources: the HTTP bindings and messages of loyalty.v1.PosService (the compiled proto
descriptors), the error catalogue (domain/errors.py CATALOGO) and the codigos each
operation can answer (api/operation_errors.py), the permission table
(domain/permissions.py REQUIRED), the limits of the request parsers (imported from the
modules that enforce them) and the demo fixture (runtime/cli/demo_fixture.json: every example
names its fans, codes and promotions). Envoy serves the file at /api/v1/openapi.json.

    python scripts/gen_openapi.py           # rewrite gateway/openapi.json
    python scripts/gen_openapi.py --check   # exit 1 when gateway/openapi.json is stale

What the descriptors cannot say (the JSON types a google.protobuf.Value field takes, which
fields are present only sometimes, enums, formats, limits, which fields are alternatives)
is in the tables below, taken from the contract (shared/spec/pos-api-v1.md), DESIGN.md §2
and the parsers themselves. The request schemas describe what the server accepts, not
only what the contract names: a request the schema allows is one the server reads (it may
still be refused for what no schema can know: an unknown fan, a cursor the server did not
issue, a time more than 24 h ahead of its clock, an `id_externo` used for another sale),
and a request the schema refuses is one the server refuses with 400. The text rules are
regular expressions that mean the same in ECMA-262 and Python (no flags, lookarounds or
named groups); tests/unit/test_openapi_document.py checks them against the parsers.
Fields for native gRPC callers only (the proto's `nativo_de` option, api/native_fields.py)
are not part of the JSON API and are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from google.api import annotations_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from proto_comments import comments

from loyalty_grpc.api.native_fields import json_fields
from loyalty_grpc.api.operation_errors import EDGE, NOT_AN_OPERATIONS_ANSWER, OPERATION_ERRORS
from loyalty_grpc.api.requests import MAX_ID_EXTERNO, MAX_LABEL
from loyalty_grpc.domain.amounts import MAX_CENTAVOS, parse_importe, points_for
from loyalty_grpc.domain.codes import MAX_CODE_LENGTH, MAX_CODES_PER_CALL
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.domain.fan_ref import MAX_FAN_TEXT
from loyalty_grpc.domain.fixture import FanFixture, ProgramaFixture, parse_fixture
from loyalty_grpc.domain.integers import INT32_MAX
from loyalty_grpc.domain.permissions import REQUIRED, Permiso
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION
from loyalty_grpc.domain.promos import MAX_NOMBRE, EstadoCodigo, EstadoFan, EstadoPromo
from loyalty_grpc.domain.redeem import MAX_CODIGOS
from loyalty_grpc.domain.roster import LIMITE_DEFAULT, LIMITE_MAX
from loyalty_grpc.domain.timestamps import EPOCH_MS_DESDE, MIN_TS
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "gateway" / "openapi.json"
SERVICE = "PosService"
PACKAGE = "loyalty.v1"
# The contract's title (shared/spec/pos-api-v1.md).
TITLE = "Loyalty Point-of-Sale Integration API v1"
VERSION = "v1"

Schema = dict[str, Any]

DATE: Schema = {"type": "string", "format": "date"}
DATE_TIME: Schema = {"type": "string", "format": "date-time"}
# Promotion ids are int32 (like every number in a response).
MAX_ID = INT32_MAX
# Error codes a batch `redeem` entry can carry (domain/redeem.py _ERRORES).
REDEEM_ENTRY_ERRORS = [
    CodigoError.CODIGO_LIBERADO,
    CodigoError.CODIGO_NO_ASIGNADO,
    CodigoError.CODIGO_NO_ENCONTRADO,
]


# ---------------------------------------------------------------- regular expressions


def _alternatives(options: list[str]) -> str:
    return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"


def _digit(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return "[0-9]" if (low, high) == (0, 9) else f"[{low}-{high}]"


def _any_digits(count: int) -> str:
    return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


def _same_length(low: str, high: str) -> list[str]:
    """Alternatives matching the numerals of len(low) digits from low to high."""
    if not low:
        return [""]
    rest = len(low) - 1
    first, last = int(low[0]), int(high[0])
    if first == last:
        return [low[0] + tail for tail in _same_length(low[1:], high[1:])]
    from_zero, to_nine = low[1:] == "0" * rest, high[1:] == "9" * rest
    options = [] if from_zero else [low[0] + t for t in _same_length(low[1:], "9" * rest)]
    start, end = (first if from_zero else first + 1), (last if to_nine else last - 1)
    if start <= end:
        options.append(_digit(start, end) + _any_digits(rest))
    if not to_nine:
        options += [high[0] + t for t in _same_length("0" * rest, high[1:])]
    return options


def integer_range(low: int, high: int) -> str:
    """A regular expression for the decimal numerals of low..high (no sign, no leading
    zero), for a pattern."""
    if not 0 < low <= high:
        raise ValueError(f"bad range {low}..{high}")
    a, b = str(low), str(high)
    if len(a) == len(b):
        return _alternatives(_same_length(a, b))
    options = _same_length(a, "9" * len(a))
    options += [f"[1-9]{_any_digits(n - 1)}" for n in range(len(a) + 1, len(b))]
    options += _same_length("1" + "0" * (len(b) - 1), b)
    return _alternatives(options)


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _class_body(codes: list[int]) -> str:
    """The inside of a character class for `codes`, as ranges of escapes."""
    body = ""
    start = previous = codes[0]
    for code in [*codes[1:], -1]:
        if code != previous + 1:
            body += _escape(start) if start == previous else f"{_escape(start)}-{_escape(previous)}"
            start = code
        previous = code
    return body


# Whitespace as the server trims and splits it (Python's str.strip() and re's \s: the
# characters of str.isspace()), spelled out: ECMA-262's \s is another set (it has U+FEFF
# and lacks U+001C-U+001F and U+0085).
SPACE = _class_body([c for c in range(sys.maxunicode + 1) if chr(c).isspace()])
# C0 and C1 control characters: refused in single-line text (domain/text.py) and in codes.
CONTROL = r"\x00-\x1f\x7f-\x9f"
# Whitespace only (or nothing): what counts as "not sent" for a text field.
BLANK = rf"^[{SPACE}]*$"
# A text with a non-blank character and without U+0000 (refused: PostgreSQL text cannot
# hold it), as the `fan` value and a promotion's name are read.
SOME_TEXT = rf"^[^\x00]*[^{SPACE}\x00][^\x00]*$"
NOT_BLANK = rf"[^{SPACE}]"


def single_line_pattern(max_length: int, *, required: bool) -> str:
    """domain/text.py single_line: trimmed (Python's str.strip), then 1..max_length
    characters without control characters; blank is "not sent" unless `required`."""
    edge = rf"[^{SPACE}{CONTROL}]"
    core = rf"{edge}(?:[^{CONTROL}]{{0,{max_length - 2}}}{edge})?"
    space = f"[{SPACE}]*"
    return rf"^{space}{core}{space}$" if required else rf"^{space}(?:{core})?{space}$"


ID_EXTERNO = single_line_pattern(MAX_ID_EXTERNO, required=True)
LABEL = single_line_pattern(MAX_LABEL, required=False)
MONEDA = rf"^[{SPACE}]*(?:{_any_case(MONEDA_POR_OMISION)})?[{SPACE}]*$"


# Timestamps (domain/timestamps.py): from MIN_TS up to 24 h after the server's clock (the
# upper bound is the clock's, so no schema can hold it: the year 9999 is the limit here).
MIN_EPOCH = int(MIN_TS.timestamp())
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The last millisecond the server can represent (datetime.max, in the year 9999).
MAX_EPOCH_MS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
_DAY31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAY30 = "(?:0[1-9]|[12][0-9]|30)"
_DAY28 = "(?:0[1-9]|1[0-9]|2[0-8])"
_MONTH_DAYS_BUT_JAN_1 = (
    f"(?:01-(?:0[2-9]|[12][0-9]|3[01])|(?:0[3578]|1[02])-{_DAY31}|(?:0[469]|11)-{_DAY30}"
    f"|02-{_DAY28})"
)
_MONTH_DAYS = f"(?:(?:0[13578]|1[02])-{_DAY31}|(?:0[469]|11)-{_DAY30}|02-{_DAY28})"
# Leap years from 2000: the year's last two digits a non-zero multiple of 4, or a century
# divisible by 400.
_LEAP_YEAR = "(?:[2-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)"
# MIN_TS is 2000-01-01T00:00:00Z; a local time on that day with a positive offset falls
# before it, so the pattern starts on 2000-01-02 (the day is not worth an exact rule).
_DATE = (
    f"(?:{integer_range(MIN_TS.year + 1, 9999)}-{_MONTH_DAYS}"
    f"|{MIN_TS.year}-{_MONTH_DAYS_BUT_JAN_1}|{_LEAP_YEAR}-02-29)"
)
_TIME = "[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.,][0-9]{1,9})?)?"
_ZONE = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)?"
_EPOCH_SECONDS = integer_range(MIN_EPOCH, EPOCH_MS_DESDE - 1)
_EPOCH_MS = integer_range(MIN_EPOCH * 1000, MAX_EPOCH_MS)
TS_TEXT = (
    rf"^[{SPACE}]*(?:{_DATE}{_TIME}{_ZONE}"
    rf"|0{{0,16}}(?:{_EPOCH_SECONDS}|{_EPOCH_MS})(?:\.[0-9]{{1,16}})?)[{SPACE}]*$"
)
TS_NUMBER_SECONDS: Schema = {
    "type": "number",
    "minimum": MIN_EPOCH,
    "exclusiveMaximum": EPOCH_MS_DESDE,
    "description": "Epoch seconds.",
}
TS_NUMBER_MS: Schema = {
    "type": "number",
    "minimum": MIN_EPOCH * 1000,
    "exclusiveMaximum": MAX_EPOCH_MS + 1,
    "description": f"Epoch milliseconds (any value from {EPOCH_MS_DESDE}).",
}


# Amounts in pesos as text (domain/amounts.py): an optional `$`, `MX$` or `MXN` before
# and/or `MXN` after (any case; spaces, U+00A0 or U+202F between), then the number with
# its separators, at most MAX_CENTAVOS. Bounded repetitions keep it within the parser's
# 64 characters.
MAX_PESOS = MAX_CENTAVOS // 100
_SPACES = "[ \\u00a0\\u202f]{0,4}"
_MAX_DIGITS = len(str(MAX_PESOS - 1))


def _importe_number() -> str:
    if str(MAX_PESOS).rstrip("0") != "1":
        raise SystemExit("the amount pattern assumes a maximum that is a power of ten")
    top = str(MAX_PESOS)
    options = [
        # Digits only, or one separator followed by 1-2 decimals.
        f"0{{0,8}}[0-9]{{1,{_MAX_DIGITS}}}(?:[.,][0-9]{{1,2}})?",
        f"0{{0,8}}{top}(?:[.,]00?)?",
    ]
    for thousands, decimal in ((",", "."), (".", ",")):
        sep, dec = (("\\" + c if c == "." else c) for c in (thousands, decimal))
        # A first group of 1-3 digits without a leading zero, then groups of 3.
        grouped = [
            ("[1-9]" if first == 1 else f"[1-9][0-9]{{0,{first - 1}}}")
            + f"{sep}[0-9]{{3}}" * groups
            for groups in range(1, _MAX_DIGITS // 3 + 1)
            if (first := min(3, _MAX_DIGITS - 3 * groups)) >= 1
        ]
        head = len(top) % 3 or 3
        top_grouped = sep.join([top[:head]] + ["000"] * ((len(top) - head) // 3))
        options += [
            f"{_alternatives(grouped)}(?:{dec}[0-9]{{1,2}})?",
            f"{top_grouped}(?:{dec}00?)?",
        ]
    return _alternatives(options)


_CURRENCY = r"(?:[Mm][Xx]\$|[Mm][Xx][Nn]|\$)"
# Zero with a minus sign before or after the currency is zero, not a negative amount.
_MINUS_ZERO = (
    rf"(?:-{_SPACES}(?:{_CURRENCY}{_SPACES})?|{_CURRENCY}{_SPACES}-{_SPACES})"
    r"0{1,9}(?:[.,]0{1,2})?"
)
IMPORTE_TEXT = (
    rf"^[{SPACE}]*(?:(?:{_CURRENCY}{_SPACES})?{_importe_number()}|{_MINUS_ZERO})"
    rf"(?:{_SPACES}[Mm][Xx][Nn])?[{SPACE}]*$"
)
IMPORTE_NUMBER: Schema = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_PESOS,
    "multipleOf": 0.01,
    "description": "Pesos, at most 2 decimals (float noise such as 30.000000000000004 is "
    "rounded to the cent).",
}

# Codes as deposited (domain/codes.py): trimmed, 1..MAX_CODE_LENGTH characters, printable
# ASCII (no control characters, nothing else) except the space and the other characters
# that separate codes in pasted text (`,`, `;`).
_CODE = rf"[\x21-\x2b\x2d-\x3a\x3c-\x7e]{{1,{MAX_CODE_LENGTH}}}"
CODE_ITEM = rf"^[{SPACE}]*{_CODE}[{SPACE}]*$"
CODES_TEXT = rf"^[{SPACE},;]*{_CODE}(?:[{SPACE},;]+{_CODE})*[{SPACE},;]*$"


# ---------------------------------------------------------------- request fields

NULL: Schema = {"type": "null"}
BLANK_TEXT: Schema = {"type": ["string", "null"], "pattern": BLANK}
NO_CODES: Schema = {"type": ["array", "null"], "maxItems": 0}

TS: Schema = {
    "oneOf": [
        TS_NUMBER_SECONDS,
        TS_NUMBER_MS,
        {"type": "string", "minLength": 1, "pattern": TS_TEXT},
        NULL,
    ],
    "description": "ISO 8601 with a time (`T`, `t` or a space; seconds and a fraction of "
    "up to 9 digits optional; zone `Z`, `±hh:mm`, `±hhmm` or `±hh`, none: UTC), epoch "
    f"seconds or epoch milliseconds (from {EPOCH_MS_DESDE}), as a number or a text of "
    f"digits; from {MIN_TS.isoformat().replace('+00:00', 'Z')} up to 24 h after the "
    "server's clock (later: `ts_invalido`). Absent or null: the time the server receives it.",
}
PROMO_SENT: Schema = {
    "oneOf": [
        {"type": "integer", "minimum": 1, "maximum": MAX_ID},
        {"type": "string", "minLength": 1, "pattern": SOME_TEXT},
    ]
}
CODES_SENT: Schema = {
    "oneOf": [
        {
            "type": "array",
            "items": {"type": "string", "pattern": CODE_ITEM},
            "minItems": 1,
            "maxItems": MAX_CODES_PER_CALL,
        },
        {"type": "string", "minLength": 1, "pattern": CODES_TEXT},
    ]
}
CODES_DESCRIPTION = (
    "An array of codes, or the codes as pasted text (split on runs of whitespace, commas "
    f"and semicolons); at most {MAX_CODES_PER_CALL} entries read, repeats included. A code "
    f"is trimmed and upper-cased: 1 to {MAX_CODE_LENGTH} printable ASCII characters, no "
    "whitespace, `,` or `;`."
)
FAN_DESCRIPTION = (
    "The fan in any of the five forms: Fan ID, coupon code delivered to the fan, QR token, "
    f"full QR URL or e-mail; at most {MAX_FAN_TEXT} characters. Fan IDs, codes and QR "
    "tokens are ASCII: a value of another form with another character matches no fan."
)


def _label(alias_of: str | None = None) -> Schema:
    schema: Schema = {"type": ["string", "null"], "pattern": LABEL}
    text = f"At most {MAX_LABEL} characters after trimming, no control characters."
    schema["description"] = f"Alias of {alias_of}. {text}" if alias_of else text
    return schema


def _alias(schema: Schema, of: str) -> Schema:
    return {**schema, "description": f"Alias of {of}."}


_FAN_FIELD: Schema = {
    "type": ["string", "null"],
    "maxLength": MAX_FAN_TEXT,
    "description": FAN_DESCRIPTION,
}
_ID_EXTERNO_FIELD: Schema = {
    "type": ["string", "null"],
    "description": f"The caller's sale id, the idempotency key: at most {MAX_ID_EXTERNO} "
    "characters after trimming, no control characters.",
}
_CENTAVOS_FIELD: Schema = {
    "type": ["integer", "null"],
    "minimum": 0,
    "maximum": MAX_CENTAVOS,
    "description": "Integer cents (a JSON number with an integral value; text is "
    "`importe_invalido`).",
}
_PROMO_FIELD: Schema = {
    "oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_ID}, {"type": "string"}, NULL],
    "description": "Promotion id, or its exact name (case-insensitive; at most "
    f"{MAX_NOMBRE} characters after trimming); a text of digits is the id, or the name when "
    "no promotion has that id.",
}
_CODES_FIELD: Schema = {
    "oneOf": [
        {
            "type": "array",
            "items": {"type": "string", "pattern": CODE_ITEM},
            "maxItems": MAX_CODES_PER_CALL,
        },
        {"type": "string"},
        NULL,
    ],
    "description": CODES_DESCRIPTION,
}
_REDEEM_CODIGOS: Schema = {
    "type": ["array", "null"],
    "items": {"type": "string"},
    "maxItems": MAX_CODIGOS,
    "description": f"Batch form, up to {MAX_CODIGOS} codes (an empty list is not sent); "
    "an empty or unknown code is that entry's `codigo_no_encontrado`; a code over "
    f"{MAX_CODE_LENGTH} characters after trimming refuses the call (`codigo_invalido`).",
}
_LIMITE: Schema = {
    "minimum": 1,
    "description": f"Page size; default {LIMITE_DEFAULT}; values over {LIMITE_MAX} are "
    f"served as {LIMITE_MAX}.",
}

# "Message.field" -> its schema as a property, where the descriptor alone is not enough.
# The two point figures of `tx` and `redeem` answers (the batch entries too): what this call
# credited, and what the sale or redemption credited when it was applied (issue 23 §2).
_INT32: Schema = {"type": "integer", "format": "int32"}
TX_OTORGADOS: Schema = {
    **_INT32,
    "description": "Points credited by this call: floor(cents × the program's rate / 100); "
    "0 when `duplicado` (the first call credited them) or with a test key.",
}
TX_ACREDITADOS: Schema = {
    **_INT32,
    "description": "Points the sale credited when it was applied, by this call or by an "
    "earlier one with the same `id_externo`: on a retry (`duplicado`: true) what the first "
    "answer's `puntos_otorgados` said, so the till can still show what the sale earned. 0 "
    "for a test key's sale. A later void by the back office does not change it (the void "
    "shows in `saldo`).",
}
CANJE_OTORGADOS: Schema = {
    **_INT32,
    "description": "The promotion's `puntos_canje` credited to the code's fan by this call; "
    "0 when `duplicado` or with a test key.",
}
CANJE_ACREDITADOS: Schema = {
    **_INT32,
    "description": "Points the code's redemption credited to its fan when it was applied, "
    "by this call or by an earlier one: on a retry (`duplicado`: true) what the first "
    "answer's `puntos_otorgados` said. 0 when a test key redeemed it or the promotion was "
    "worth 0; a later change of the promotion's `puntos_canje` does not change it.",
}

FIELD_SCHEMAS: dict[str, Schema] = {
    # Requests. Every field may be null ("not sent", like an absent field).
    "ResolveFanRequest.fan": _FAN_FIELD,
    "ResolveFanRequest.fan_id": _alias(_FAN_FIELD, "fan"),
    "ResolveFanRequest.qr": _alias(_FAN_FIELD, "fan"),
    "ResolveFanRequest.codigo": _alias(_FAN_FIELD, "fan"),
    "RegisterTxRequest.id_externo": _ID_EXTERNO_FIELD,
    "RegisterTxRequest.id": _alias(_ID_EXTERNO_FIELD, "id_externo"),
    "RegisterTxRequest.tx_id": _alias(_ID_EXTERNO_FIELD, "id_externo"),
    "RegisterTxRequest.fan": _FAN_FIELD,
    "RegisterTxRequest.fan_id": _alias(_FAN_FIELD, "fan"),
    "RegisterTxRequest.qr": _alias(_FAN_FIELD, "fan"),
    "RegisterTxRequest.codigo": _alias(_FAN_FIELD, "fan"),
    "RegisterTxRequest.importe": {
        "oneOf": [
            IMPORTE_NUMBER,
            {"type": "string", "minLength": 1, "pattern": IMPORTE_TEXT},
            NULL,
        ],
        "description": "Pesos: a number, or a text with either separator convention "
        '(`"1,234.50"`, `"1.234,50"`) and an optional `$`, `MX$` or `MXN` before or `MXN` '
        f'after (`"$ 1,234.50"`); from 0 to {MAX_PESOS:,}.00.',
    },
    "RegisterTxRequest.importe_centavos": _CENTAVOS_FIELD,
    "RegisterTxRequest.centavos": _alias(_CENTAVOS_FIELD, "importe_centavos"),
    "RegisterTxRequest.amount_cents": _alias(_CENTAVOS_FIELD, "importe_centavos"),
    "RegisterTxRequest.terminal": _label(),
    "RegisterTxRequest.caja": _label("terminal"),
    "RegisterTxRequest.sitio": _label(),
    "RegisterTxRequest.sucursal": _label("sitio"),
    "RegisterTxRequest.ts": TS,
    "RegisterTxRequest.moneda": {
        "type": ["string", "null"],
        "pattern": MONEDA,
        "description": f"The program's currency, {MONEDA_POR_OMISION} (any case); blank or "
        f"absent: {MONEDA_POR_OMISION}.",
    },
    "RedeemRequest.codigo": {
        "type": ["string", "null"],
        "description": f"Single form: at most {MAX_CODE_LENGTH} characters after trimming "
        "(longer: `codigo_invalido`); a code with a character that is not ASCII is not found.",
    },
    "RedeemRequest.codigos": _REDEEM_CODIGOS,
    "RedeemRequest.terminal": _label(),
    "RedeemRequest.caja": _label("terminal"),
    "RedeemRequest.ts": TS,
    "DepositCodesRequest.promo": _PROMO_FIELD,
    "DepositCodesRequest.promo_id": _alias(_PROMO_FIELD, "promo"),
    "DepositCodesRequest.codigos": _CODES_FIELD,
    "DepositCodesRequest.codes": _alias(_CODES_FIELD, "codigos"),
    "RosterPostRequest.desde": {
        "type": ["string", "null"],
        "description": "The `siguiente` of the previous call; absent, null or blank: a new "
        "snapshot. (A number is never a cursor of this service: `cursor_invalido`.)",
    },
    "RosterPostRequest.limite": {"type": ["integer", "null"], **_LIMITE},
    # GET /api/v1/roster query parameters (proto strings parsed by the server).
    "RosterRequest.desde": {
        "type": "string",
        "description": "The `siguiente` of the previous call; absent or empty: a new snapshot.",
    },
    "RosterRequest.limite": {"type": "integer", **_LIMITE},
    # Responses.
    "ResolveFanData.promo": {
        "type": ["object", "null"],
        "description": "The fan's current promotion, or null (not an error).",
        "properties": {
            "nombre": {"type": "string"},
            "descripcion": {"type": "string"},
            "vigencia_fin": DATE,
            "codigo": {"type": "string"},
        },
        "required": ["nombre", "descripcion", "vigencia_fin", "codigo"],
    },
    "RedeemData.resultados": {
        "type": "array",
        "description": "One object per input code, in input order.",
        "items": {
            "oneOf": [
                {"$ref": "#/components/schemas/RedeemBatchEntryOk"},
                {"$ref": "#/components/schemas/RedeemBatchEntryError"},
            ]
        },
    },
    "RedeemData.estado": {"const": "canjeado"},
    "RegisterTxData.puntos_otorgados": TX_OTORGADOS,
    "RegisterTxData.puntos_acreditados": TX_ACREDITADOS,
    "RedeemData.puntos_otorgados": CANJE_OTORGADOS,
    "RedeemData.puntos_acreditados": CANJE_ACREDITADOS,
    "PingData.modo": {"type": "string", "enum": ["vivo", "prueba"]},
    "PingGetData.modo": {"type": "string", "enum": ["vivo", "prueba"]},
    "PingData.permisos": {
        "type": "array",
        "items": {"type": "string", "enum": [p.value for p in Permiso]},
    },
    "PingData.hora": DATE_TIME,
    "PingGetData.hora": DATE_TIME,
    "Promo.estado": {"type": "string", "enum": [e.value for e in EstadoPromo]},
    "PromoRef.estado": {"type": "string", "enum": [e.value for e in EstadoPromo]},
    "Promo.vigencia_fin": DATE,
    "RosterFan.estado": {"type": "string", "enum": [e.value for e in EstadoFan]},
    "RosterFan.actualizado": DATE_TIME,
    "Baja.en": DATE_TIME,
}

# Message fields that are absent in some responses (an unset message field is not printed).
SOMETIMES_ABSENT = {"RosterFan.baja"}


@dataclass(frozen=True)
class Group:
    """Request fields of which the client sends one: the canonical name and its aliases.
    `required`: exactly one (none: campo_requerido); else at most one. Two: solicitud_invalida.
    """

    fields: tuple[str, ...]
    required: bool = True


GROUPS: dict[str, list[Group]] = {
    "ResolveFanRequest": [Group(("fan", "fan_id", "qr", "codigo"))],
    "RegisterTxRequest": [
        Group(("id_externo", "id", "tx_id")),
        Group(("fan", "fan_id", "qr", "codigo")),
        Group(("importe", "importe_centavos", "centavos", "amount_cents")),
        Group(("terminal", "caja"), required=False),
        Group(("sitio", "sucursal"), required=False),
    ],
    "RedeemRequest": [
        Group(("codigo", "codigos")),
        Group(("terminal", "caja"), required=False),
    ],
    "DepositCodesRequest": [Group(("promo", "promo_id")), Group(("codigos", "codes"))],
}

# The value of a field of a required group when it is the one sent ("Message.field";
# besides its property schema), and the values of the others that count as not sent
# (default: null or blank text for strings, null for google.protobuf.Value fields).
# (minLength for the tools that ignore patterns; the pattern also refuses whitespace only.)
_FAN_SENT: Schema = {"type": "string", "minLength": 1, "pattern": SOME_TEXT}
_ID_SENT: Schema = {"type": "string", "minLength": 1, "pattern": ID_EXTERNO}
_CENTAVOS_SENT: Schema = {"type": "integer"}
SENT: dict[str, Schema] = {
    **{f"ResolveFanRequest.{name}": _FAN_SENT for name in ("fan", "fan_id", "qr", "codigo")},
    **{f"RegisterTxRequest.{name}": _FAN_SENT for name in ("fan", "fan_id", "qr", "codigo")},
    **{f"RegisterTxRequest.{name}": _ID_SENT for name in ("id_externo", "id", "tx_id")},
    "RegisterTxRequest.importe": {"type": ["number", "string"]},
    **{
        f"RegisterTxRequest.{name}": _CENTAVOS_SENT
        for name in ("importe_centavos", "centavos", "amount_cents")
    },
    "RedeemRequest.codigo": {"type": "string", "minLength": 1, "pattern": NOT_BLANK},
    "RedeemRequest.codigos": {"type": "array", "minItems": 1},
    "DepositCodesRequest.promo": PROMO_SENT,
    "DepositCodesRequest.promo_id": PROMO_SENT,
    "DepositCodesRequest.codigos": CODES_SENT,
    "DepositCodesRequest.codes": CODES_SENT,
}
NOT_SENT: dict[str, Schema] = {
    "RedeemRequest.codigos": NO_CODES,
    "DepositCodesRequest.promo": BLANK_TEXT,
    "DepositCodesRequest.promo_id": BLANK_TEXT,
    "DepositCodesRequest.codigos": BLANK_TEXT,
    "DepositCodesRequest.codes": BLANK_TEXT,
}
# What counts as "not sent" in each request with groups, and what no schema can say.
GROUP_NOTES: dict[str, str] = {
    "ResolveFanRequest": "Null or a blank text is not sent.",
    "RegisterTxRequest": "Null is not sent, and so is a blank text in the text fields (in "
    "`importe` and `ts` it is invalid). `importe` and one cents field may also come "
    "together when they agree (the same amount), which no schema can say; otherwise "
    "`importe_invalido`.",
    "RedeemRequest": "Null is not sent, and so are a blank `codigo`, `terminal` or `caja` "
    "and an empty `codigos`.",
    "DepositCodesRequest": "Null or a blank text is not sent.",
}


def _group_schema(message: Descriptor, group: Group) -> Schema:
    """oneOf the shapes in which exactly one field of the group is sent (required), or anyOf
    the shapes in which all but one are not sent (at most one)."""

    def not_sent(name: str) -> Schema:
        key = f"{message.name}.{name}"
        if key in NOT_SENT:
            return NOT_SENT[key]
        field = message.fields_by_name[name]
        return BLANK_TEXT if field.type == FieldDescriptor.TYPE_STRING else NULL

    if not group.required:
        return {"anyOf": [{"properties": {name: not_sent(name)}} for name in group.fields]}
    return {
        "oneOf": [
            {
                "required": [name],
                "properties": {
                    other: SENT[f"{message.name}.{other}"] if other == name else not_sent(other)
                    for other in group.fields
                },
            }
            for name in group.fields
        ]
    }


# ---------------------------------------------------------------- responses

# Messages printed in one of several forms, each a complete object of its own: the message
# -> {form name: (fields, description)}.
FORMS: dict[str, dict[str, tuple[list[str], str]]] = {
    "RedeemData": {
        "RedeemSingleData": (
            [
                "codigo",
                "estado",
                "duplicado",
                "promo",
                "fan",
                "puntos_otorgados",
                "puntos_acreditados",
            ],
            "Single form (`codigo`).",
        ),
        "RedeemBatchData": (
            ["resumen", "resultados"],
            "Batch form (`codigos`): the summary and one entry per input code.",
        ),
    },
}
EXTRA_SCHEMAS: dict[str, Schema] = {
    "RedeemBatchEntryOk": {
        "type": "object",
        "description": "An entry of a batch whose code was redeemed, now or before.",
        "properties": {
            "codigo": {"type": "string"},
            "ok": {
                "const": True,
                "description": "The code was redeemed, by this call or before (`duplicado`).",
            },
            "estado": {"const": "canjeado"},
            "duplicado": {"type": "boolean"},
            "promo": {"type": "string"},
            "fan": {"$ref": "#/components/schemas/RedeemFan"},
            "puntos_otorgados": CANJE_OTORGADOS,
            "puntos_acreditados": CANJE_ACREDITADOS,
        },
        "required": [
            "codigo",
            "ok",
            "estado",
            "duplicado",
            "promo",
            "fan",
            "puntos_otorgados",
            "puntos_acreditados",
        ],
        "additionalProperties": False,
    },
    "RedeemBatchEntryError": {
        "type": "object",
        "description": "An entry of a batch whose code was not redeemed.",
        "properties": {
            "codigo": {"type": "string"},
            "ok": {"const": False, "description": "The code was not redeemed: `error` says why."},
            "error": {
                "type": "object",
                "properties": {
                    "codigo": {"type": "string", "enum": [c.value for c in REDEEM_ENTRY_ERRORS]},
                    "mensaje": {"type": "string"},
                },
                "required": ["codigo", "mensaje"],
                "additionalProperties": False,
            },
        },
        "required": ["codigo", "ok", "error"],
        "additionalProperties": False,
    },
}

# The proto fields whose comments describe EXTRA_SCHEMAS' properties (the batch entries
# are google.protobuf.Struct on the JSON side; their fields are the single form's).
EXTRA_COMMENTS = {
    "RedeemBatchEntryOk": {
        "codigo": "loyalty.v1.RedeemResultado.codigo",
        "estado": "loyalty.v1.RedeemData.estado",
        "duplicado": "loyalty.v1.RedeemData.duplicado",
        "promo": "loyalty.v1.RedeemData.promo",
        "fan": "loyalty.v1.RedeemData.fan",
    },
    "RedeemBatchEntryError": {
        "codigo": "loyalty.v1.RedeemResultado.codigo",
        "error": "loyalty.v1.RedeemResultado.error",
    },
}


def extra_schemas() -> dict[str, Schema]:
    """EXTRA_SCHEMAS, each property described by its proto field's comment."""
    described: dict[str, Schema] = json.loads(json.dumps(EXTRA_SCHEMAS))
    for name, fields in EXTRA_COMMENTS.items():
        for prop, full_name in fields.items():
            described[name]["properties"][prop]["description"] = comments()[full_name]
    return described


# One line per operation (the proto's comments are not in the runtime descriptors).
SUMMARIES = {
    "Ping": "Check that the key works (all five fields).",
    "PingGet": "Check that the key works (programa, modo and hora only).",
    "ResolveFan": "Identify a fan and any current promotion; changes no business state.",
    "RegisterTx": "Register a closed sale and credit points; idempotent by id_externo.",
    "Redeem": "Redeem one coupon code (codigo) or a batch (codigos); idempotent by code.",
    "ListPromos": "List the program's promotions with their coupon inventory.",
    "DepositCodes": "Deposit coupon codes into a promotion's inventory.",
    "Roster": "Change feed of the fan roster (parameters in the query string).",
    "RosterPost": "Change feed of the fan roster (parameters in a JSON body).",
}


# ---------------------------------------------------------------- examples


def demo_program() -> ProgramaFixture:
    """The first program of the demo fixture (`up --demo`), which the examples name."""
    text = (resources.files("loyalty_grpc.runtime.cli") / "demo_fixture.json").read_text(
        encoding="utf-8"
    )
    return parse_fixture(text).programas[0]


def _example(summary: str, value: Schema) -> Schema:
    return {"summary": summary, "value": value}


def examples(programa: ProgramaFixture) -> dict[str, dict[str, Schema]]:
    """Request examples by message: the explicit cases schemathesis tries first, all on the
    demo program (tests/e2e/test_openapi_schemathesis.py loads its fans and promotions)."""
    fans = [f for f in programa.fans if f.estado is EstadoFan.ACTIVO]
    activos = {f.fan_id for f in fans}
    promo = next(p for p in programa.promos if p.estado is not EstadoPromo.TERMINADA)
    codes = [c for p in programa.promos for c in p.codigos]
    by_state = {estado: [c.codigo for c in codes if c.estado is estado] for estado in EstadoCodigo}
    # Codes delivered to active fans (fan/resolve finds a fan by them).
    assigned = [c.codigo for c in codes if c.estado is EstadoCodigo.ASIGNADO and c.fan in activos]
    available = [c.codigo for c in promo.codigos if c.estado is EstadoCodigo.DISPONIBLE]

    def fan(index: int) -> FanFixture:
        return fans[index % len(fans)]

    qr_url = f"{programa.qr_url.rstrip('/')}/v/{fan(2).qr_token}"
    return {
        "ResolveFanRequest": {
            "fan_id": _example("By Fan ID", {"fan": fan(0).fan_id}),
            "correo": _example("By e-mail", {"fan": fan(1).correo}),
            "qr_url": _example("By full QR URL", {"fan": qr_url}),
            "qr": _example("By QR token (alias qr)", {"qr": fan(3).qr_token}),
            "codigo": _example("By a coupon code delivered to the fan", {"codigo": assigned[-1]}),
        },
        "RegisterTxRequest": {
            "pesos": _example(
                "Amount in pesos as text",
                {
                    "id_externo": "V-1001",
                    "fan": fan(0).fan_id,
                    "importe": "1,234.50",
                    "terminal": "Caja 3",
                    "ts": "2024-05-01T18:30:00-06:00",
                },
            ),
            "centavos": _example(
                "Amount in cents, fan by e-mail",
                {"id_externo": "V-1002", "fan": fan(1).correo, "importe_centavos": 25000},
            ),
        },
        "RedeemRequest": {
            "single": _example("One code", {"codigo": assigned[0], "terminal": "Caja 3"}),
            "batch": _example(
                "A batch: one code of each state",
                {
                    "codigos": [
                        assigned[-1] if estado is EstadoCodigo.ASIGNADO else by_state[estado][0]
                        for estado in EstadoCodigo
                        if by_state[estado]
                    ]
                },
            ),
        },
        "DepositCodesRequest": {
            "array": _example(
                "Codes as an array, promotion by name",
                {"promo": promo.nombre, "codigos": available},
            ),
            "text": _example(
                "Codes as pasted text", {"promo": promo.nombre, "codes": ", ".join(available)}
            ),
        },
        "RosterPostRequest": {
            "first_page": _example("A new snapshot, pages of 2", {"limite": 2}),
        },
    }


def response_examples(programa: ProgramaFixture) -> dict[str, dict[str, Schema]]:
    """Success examples by response message, for the answers whose fields a retry changes:
    the first answer of the `tx` and single `redeem` request examples and the answer to
    their retry (`duplicado`, `puntos_otorgados` 0, `puntos_acreditados` unchanged), on a
    fresh demo program (the first sale is folio 1)."""
    requests = examples(programa)
    sale = requests["RegisterTxRequest"]["pesos"]["value"]
    fans = {f.fan_id: f for f in programa.fans}
    buyer = fans[sale["fan"]]
    puntos = points_for(parse_importe(sale["importe"]), programa.tasa_puntos)
    tx = {
        "duplicado": False,
        "tx": 1,
        "puntos_otorgados": puntos,
        "saldo": buyer.puntos + puntos,
        "fan": {"id": buyer.fan_id, "correo": buyer.correo},
        "puntos_acreditados": puntos,
    }
    codigo = requests["RedeemRequest"]["single"]["value"]["codigo"]
    promo, code = next((p, c) for p in programa.promos for c in p.codigos if c.codigo == codigo)
    assert code.fan is not None
    redeemed = {
        "codigo": codigo,
        "estado": EstadoCodigo.CANJEADO.value,
        "duplicado": False,
        "promo": promo.nombre,
        "fan": {"correo": fans[code.fan].correo},
        "puntos_otorgados": promo.puntos_canje,
        "puntos_acreditados": promo.puntos_canje,
    }

    def envelope(data: Schema) -> Schema:
        return {"ok": True, "data": data}

    return {
        "RegisterTxResponse": {
            "first": _example("The sale (request example `pesos`), answered", envelope(tx)),
            "retry": _example(
                "The same request again (its first answer was lost): the original folio, "
                "nothing credited now, what the sale credited",
                envelope({**tx, "duplicado": True, "puntos_otorgados": 0}),
            ),
        },
        "RedeemResponse": {
            "first": _example("One code (request example `single`), redeemed", envelope(redeemed)),
            "retry": _example(
                "The same code again: redeemed before, nothing credited now, what its "
                "redemption credited",
                envelope({**redeemed, "duplicado": True, "puntos_otorgados": 0}),
            ),
        },
    }


SCALARS: dict[int, Schema] = {
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
}
WELL_KNOWN: dict[str, Schema] = {
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.Struct": {"type": "object"},
}

HEADERS: dict[str, Schema] = {
    "RateLimit": {
        "description": "Remaining quota of the key in the current window "
        "(IETF RateLimit header fields draft).",
        "schema": {"type": "string"},
    },
    "RateLimit-Policy": {
        "description": "The quota policy (the contract: 600 calls per minute).",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 0},
    },
}


def _ref(kind: str, name: str) -> Schema:
    return {"$ref": f"#/components/{kind}/{name}"}


class Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, Schema] = {}

    def message(self, descriptor: Descriptor) -> Schema:
        """A reference to the schema of `descriptor` (built once)."""
        if descriptor.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[descriptor.full_name])
        if descriptor.file.package != PACKAGE:
            raise SystemExit(f"no schema for {descriptor.full_name}")
        name = descriptor.name
        if name not in self.schemas:
            self.schemas[name] = {}  # placeholder: recursion-safe
            if name in FORMS:
                self.schemas[name] = self._forms(descriptor)
            elif name.endswith("Request"):
                self.schemas[name] = self._request(descriptor)
            else:
                self.schemas[name] = self._object(descriptor)
        return _ref("schemas", name)

    def _properties(self, descriptor: Descriptor, names: list[str]) -> dict[str, Schema]:
        """Each field's schema, described by its comment in the proto where the schema
        says nothing itself."""
        properties = {}
        for name in names:
            field = descriptor.fields_by_name[name]
            schema = self.field(field, f"{descriptor.name}.{name}")
            comment = comments().get(field.full_name)
            if comment and "description" not in schema:
                schema["description"] = comment
            properties[name] = schema
        return properties

    def _object(self, descriptor: Descriptor) -> Schema:
        """A response object. Printed always: plain scalars (always_print_primitive_fields),
        repeated fields and set message fields; `optional` scalars only when set."""
        required = [
            field.name
            for field in json_fields(descriptor)
            if (field.is_repeated or not field.has_presence or field.message_type is not None)
            and f"{descriptor.name}.{field.name}" not in SOMETIMES_ABSENT
        ]
        schema: Schema = {
            "type": "object",
            "properties": self._properties(descriptor, [f.name for f in json_fields(descriptor)]),
        }
        if required:
            schema["required"] = required
        return schema

    def _forms(self, descriptor: Descriptor) -> Schema:
        """oneOf complete objects, one per form (each a named schema of its own, with every
        field of its form required and no other field), so that generated clients get a
        type per form."""
        forms = FORMS[descriptor.name]
        covered = sorted(name for names, _ in forms.values() for name in names)
        if covered != sorted(f.name for f in json_fields(descriptor)):
            raise SystemExit(f"{descriptor.name}: the forms must cover every field once")
        for form, (names, description) in forms.items():
            self.schemas[form] = {
                "type": "object",
                "description": description,
                "properties": self._properties(descriptor, names),
                "required": names,
                "additionalProperties": False,
            }
        return {"oneOf": [_ref("schemas", form) for form in forms]}

    def _request(self, descriptor: Descriptor) -> Schema:
        """A request body: its properties; the groups of alternatives; field names are
        never empty (a body with a "" key is refused before it reaches the server)."""
        schema: Schema = {
            "type": "object",
            "properties": self._properties(descriptor, [f.name for f in json_fields(descriptor)]),
            "propertyNames": {"minLength": 1},
        }
        groups = GROUPS.get(descriptor.name, [])
        notes = [
            "Send exactly one of " + " / ".join(f"`{name}`" for name in group.fields) + "."
            for group in groups
            if group.required
        ] + [
            "Send at most one of " + " / ".join(f"`{name}`" for name in group.fields) + "."
            for group in groups
            if not group.required
        ]
        if groups:
            schema["allOf"] = [_group_schema(descriptor, group) for group in groups]
        if descriptor.name in GROUP_NOTES:
            notes.append(GROUP_NOTES[descriptor.name])
        notes.append("Unknown fields are ignored (their names cannot be empty).")
        schema["description"] = " ".join(notes)
        return schema

    def field(self, field: FieldDescriptor, key: str) -> Schema:
        if key in FIELD_SCHEMAS:
            return dict(FIELD_SCHEMAS[key])
        if field.message_type is not None:
            item = self.message(field.message_type)
        elif field.type in SCALARS:
            item = dict(SCALARS[field.type])
        else:
            raise SystemExit(f"{key}: no JSON schema for field type {field.type}")
        return {"type": "array", "items": item} if field.is_repeated else item


def _error_response(codigos: list[CodigoError], status: int) -> Schema:
    """An error answer of one HTTP status: `codigos` (all of that status) listed with when
    each is sent, and the enum of `error.codigo` they make."""
    lines = [f"- `{c.value}`: {CATALOGO[c].cuando}" for c in sorted(codigos)]
    headers = {
        "RateLimit": _ref("headers", "RateLimit"),
        "RateLimit-Policy": _ref("headers", "RateLimit-Policy"),
    }
    if status == 429:
        headers["Retry-After"] = _ref("headers", "Retry-After")
    return {
        "description": "\n".join(lines),
        "headers": headers,
        "content": {
            "application/json": {
                "schema": {
                    "allOf": [_ref("schemas", "ErrorEnvelope")],
                    "properties": {
                        "error": {
                            "properties": {
                                "codigo": {
                                    "type": "string",
                                    "enum": [c.value for c in sorted(codigos)],
                                }
                            }
                        }
                    },
                }
            }
        },
    }


def _by_status(codigos: Iterable[CodigoError]) -> dict[int, list[CodigoError]]:
    by_status: dict[int, list[CodigoError]] = {}
    for codigo in sorted(codigos):
        by_status.setdefault(CATALOGO[codigo].http, []).append(codigo)
    return {status: by_status[status] for status in sorted(by_status)}


# The codigos any call can get (api/operation_errors.EDGE) by status: an operation whose
# codigos of a status are only these refers to the shared response of components/responses.
EDGE_BY_STATUS = _by_status(EDGE)


def operation_error_responses(method: str) -> dict[str, Schema]:
    """An operation's error responses: the statuses of the codigos it can answer
    (api/operation_errors.py), each with the enum of those codigos (a `$ref` to the
    shared response when they are the codigos any call can get with that status)."""
    return {
        str(status): _ref("responses", f"Error{status}")
        if codigos == EDGE_BY_STATUS.get(status)
        else _error_response(codigos, status)
        for status, codigos in _by_status(OPERATION_ERRORS[method]).items()
    }


def shared_error_responses() -> dict[str, Schema]:
    """components/responses: per status, the codigos any call can get (the edge's), and
    the answers of the routes themselves, no operation's (a path no operation has, a
    method the path does not take), kept documented here."""
    routes = _by_status(NOT_AN_OPERATIONS_ANSWER)
    if routes.keys() & EDGE_BY_STATUS.keys():
        raise SystemExit(f"a status both of every call and of no operation: {routes}")
    return {
        f"Error{status}": _error_response(codigos, status)
        for status, codigos in sorted({**EDGE_BY_STATUS, **routes}.items())
    }


ERROR_ENVELOPE: Schema = {
    "type": "object",
    "description": "Every failure. Clients branch on `error.codigo`, never on `mensaje`.",
    "properties": {
        "ok": {"const": False},
        "error": {
            "type": "object",
            "properties": {
                "codigo": {"type": "string"},
                "mensaje": {"type": "string"},
                "detalle": {"type": "string"},
            },
            "required": ["codigo", "mensaje"],
        },
    },
    "required": ["ok", "error"],
}


def _http_rule(method: MethodDescriptor) -> tuple[str, str, str]:
    """(HTTP method, path, body) of the google.api.http option."""
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    if verb not in ("get", "post", "put", "patch", "delete"):
        raise SystemExit(f"{method.full_name}: no google.api.http binding")
    return verb, str(getattr(rule, verb)), str(rule.body)


def _permission_text(name: str) -> str:
    needed = REQUIRED[name]
    if needed is None:
        return "Permission: none special (any valid key)."
    return f"Permission: `{needed.value}`."


def build() -> Schema:
    service = pos_service_pb2.DESCRIPTOR.services_by_name[SERVICE]
    builder = Builder()
    request_examples = examples(demo_program())
    success_examples = response_examples(demo_program())
    paths: dict[str, dict[str, Schema]] = {}
    for method in service.methods:
        verb, path, body = _http_rule(method)
        output = method.output_type
        data_type = output.fields_by_name["data"].message_type
        if data_type is None:
            raise SystemExit(f"{output.full_name}.data must be a message")
        success = {
            "type": "object",
            "properties": {"ok": {"const": True}, "data": builder.message(data_type)},
            "required": ["ok", "data"],
        }
        success_media: Schema = {"schema": success}
        if output.name in success_examples:
            success_media["examples"] = success_examples[output.name]
        operation: Schema = {
            "operationId": method.name,
            "summary": SUMMARIES[method.name],
            "description": f"{_permission_text(method.name)} gRPC: "
            f"`{service.full_name}/{method.name}`.",
            "responses": {
                "200": {
                    "description": "Success envelope.",
                    "headers": {
                        "RateLimit": _ref("headers", "RateLimit"),
                        "RateLimit-Policy": _ref("headers", "RateLimit-Policy"),
                    },
                    "content": {"application/json": success_media},
                },
                **operation_error_responses(method.name),
            },
        }
        request = method.input_type
        if body == "*":
            media: Schema = {"schema": builder.message(request)}
            if request.name in request_examples:
                media["examples"] = request_examples[request.name]
            operation["requestBody"] = {
                # An absent body is an empty message: required only where a field must
                # be sent (ping and the roster's POST take none, or `{}`).
                "required": request.name in GROUPS,
                "content": {"application/json": media},
            }
        elif body:
            raise SystemExit(f'{method.full_name}: only body "*" is supported')
        else:
            # Query parameters are proto strings, read by the server: empty is not sent.
            params = [
                {
                    "name": field.name,
                    "in": "query",
                    "required": False,
                    "allowEmptyValue": True,
                    "schema": builder.field(field, f"{request.name}.{field.name}"),
                }
                for field in json_fields(request)
            ]
            if params:
                operation["parameters"] = params
        paths.setdefault(path, {})[verb] = operation

    schemas = {**builder.schemas, **extra_schemas(), "ErrorEnvelope": ERROR_ENVELOPE}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": (
                "The JSON API of the loyalty service, served by Envoy (gRPC-JSON "
                'transcoding of loyalty.v1.PosService). Success: `{"ok": true, "data": '
                '…}`; failure: `{"ok": false, "error": {"codigo", "mensaje", '
                '"detalle"}}`. A request body is one JSON object as RFC 8259 defines it '
                "(no trailing commas, comments, single quotes or NaN; no key twice; at most "
                "32 levels deep), sent as `Content-Type: application/json` in UTF-8, with "
                "the JSON types of the schemas below (null: not sent); anything else is "
                "400 `solicitud_invalida`. The examples name the demo program's fans, codes "
                "and promotions (`./dev up --demo`). Generated by scripts/gen_openapi.py "
                "from the proto descriptors, the error catalogue and the request parsers' "
                "limits; do not edit."
            ),
        },
        "servers": [{"url": "/", "description": "The host that serves this document."}],
        "security": [{"bearer": []}],
        "paths": {path: paths[path] for path in sorted(paths)},
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`Authorization: Bearer lp_vivo_…` (live key) or "
                    "`lp_prueba_…` (test key: 0 points on tx and redeem).",
                }
            },
            "headers": HEADERS,
            "responses": shared_error_responses(),
            "schemas": {name: schemas[name] for name in sorted(schemas)},
        },
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the output is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python scripts/gen_openapi.py")
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is fresh")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
