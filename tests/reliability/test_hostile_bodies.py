"""Issue 11 §4: hostile bodies against every POST endpoint (tx, redeem, fan/resolve, codes,
roster, ping). Whatever arrives: never a 5xx, always the JSON envelope, and nothing written
(sales, ledger, codes, promotions, fans and balances as they were).

Every body that could write carries otherwise valid fields (a real fan and amount, a code
`asignado` in the stack, the promotion's real name), so a hostile value the service read
loosely would show as a write: look-alike digits (`Decimal("١٢٣")` and `int("１２３")` are
123 in Python; `REL٠١` would be fan REL01), LIKE wildcards (`%`, `_`) that would match real
fans, codes or promotions, SQL text, NUL escapes, numbers beyond any range, NaN, wrong JSON
types."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import text

from tests.reliability.harness import PROMO, Client, Journal, Stack

TX, REDEEM, RESOLVE, CODES, ROSTER, PING = (
    "/api/v1/tx",
    "/api/v1/redeem",
    "/api/v1/fan/resolve",
    "/api/v1/codes",
    "/api/v1/roster",
    "/api/v1/ping",
)
ENDPOINTS = (TX, REDEEM, RESOLVE, CODES, ROSTER, PING)
READS = (RESOLVE, ROSTER, PING)
FAN = "REL01"  # a real fan (harness.World)
_codes = itertools.count(1)
_ids = itertools.count(1)


def fresh_code() -> str:
    """A code `asignado` in the stack that no other case sends."""
    return f"C-{next(_codes):05}"


@dataclass(frozen=True)
class Case:
    path: str
    name: str
    body: bytes | Callable[[], bytes]  # a function for the 10 MB ones, made when sent
    # A 200 is a correct answer (a read, or a batch that rejects every code); the database
    # must still be unchanged.
    may_succeed: bool = False

    @property
    def id(self) -> str:
        return f"{self.path.removeprefix('/api/v1/')}-{self.name}"


def dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def raw(template: str, **values: object) -> bytes:
    """A body that json.dumps cannot write (NaN, 1e400...): `template` with each {name}
    replaced by json.dumps(value) of the keyword, and each <name> by raw text."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", json.dumps(value, ensure_ascii=False))
    return template.encode()


def base(path: str) -> dict[str, object]:
    """A body of `path` that would write (or read) successfully as it is."""
    if path == TX:
        return {"id_externo": f"hostile-{next(_ids)}", "fan": FAN, "importe": "10.00"}
    if path == REDEEM:
        return {"codigo": fresh_code()}
    if path == RESOLVE:
        return {"fan": FAN}
    if path == CODES:
        return {"promo": PROMO, "codigos": [f"NEW-{next(_ids)}"]}
    if path == ROSTER:
        return {"limite": 5}
    return {}


def with_field(path: str, field: str, value: object, name: str, may_succeed: bool = False) -> Case:
    return Case(path, name, dumps({**base(path), field: value}), may_succeed)


def with_raw_field(path: str, field: str, literal: str, name: str) -> Case:
    """`field` set to a literal that is not JSON (NaN) or that json.dumps would rewrite."""
    body = {k: v for k, v in base(path).items() if k != field}
    inner = dumps(body).decode()[1:-1]
    return Case(path, name, f'{{{inner}{", " if inner else ""}"{field}": {literal}}}'.encode())


def generic(path: str) -> list[Case]:
    """The same hostile bodies for every endpoint."""
    rng = random.Random(path)
    deep = 10_000
    valid = dumps(base(path)).decode()
    cases = [
        *(Case(path, f"random-bytes-{size}", rng.randbytes(size)) for size in (1, 64, 4096)),
        Case(
            path,
            "random-printable",
            "".join(rng.choice('{}[]":,0123456789aeflnrstu\\ ') for _ in range(300)).encode(),
        ),
        Case(path, "invalid-utf8-in-string", b'{"fan": "\xff\xfe\xfd", "x": "\xc3\x28"}'),
        Case(path, "invalid-utf8-key", b'{"\xc3\x28": 1}'),
        Case(path, "overlong-utf8", b'{"fan": "\xc0\xaf\xe0\x80\xaf"}'),
        Case(path, "utf8-encoded-surrogate", b'{"fan": "\xed\xa0\x80"}'),
        Case(path, "utf16-body", valid.encode("utf-16")),
        Case(path, "bom", b"\xef\xbb\xbf" + valid.encode()),
        Case(path, "deep-objects", ('{"a":' * deep + "1" + "}" * deep).encode()),
        Case(path, "deep-lists", ("[" * deep + "]" * deep).encode()),
        Case(path, "deep-unclosed", ('{"a":[' * deep).encode()),
        Case(path, "deep-in-field", ('{"fan":' + "[" * deep + "]" * deep + "}").encode()),
        Case(path, "10MB", lambda: b'{"fan": "' + b"A" * (10 * 1024 * 1024) + b'"}'),
        Case(path, "10MB-of-spaces", lambda: valid.encode() + b" " * (10 * 1024 * 1024)),
        Case(path, "not-an-object-list", b"[]"),
        Case(path, "not-an-object-text", b'"x"'),
        Case(path, "not-an-object-null", b"null"),
        Case(path, "not-an-object-number", b"1e400"),
        Case(path, "two-objects", (valid + valid).encode()),
        Case(path, "nan", b'{"x": NaN}'),
        Case(path, "infinity", b'{"x": Infinity}'),
        Case(path, "minus-infinity", b'{"x": -Infinity}'),
        Case(path, "huge-exponent", b'{"x": 1e999999999}'),
        Case(path, "huge-integer", b'{"x": ' + b"9" * 5000 + b"}"),
        # An unknown field (its name a NUL) is ignored: a read answers.
        Case(path, "nul-escape-key", b'{"\\u0000": 1}', may_succeed=path in READS),
        Case(path, "raw-nul", b'{"x": "a\x00b"}'),
        Case(path, "lone-surrogate-escape", b'{"x": "\\ud800"}'),
        Case(path, "single-quotes", b"{'x': 1}"),
        Case(path, "comment", b'{"x": 1 /* c */}'),
        Case(path, "whitespace-only", b" \n\t "),
    ]
    if path in READS:  # a write would be right: unknown fields are ignored
        cases.append(
            Case(
                path,
                "sql-in-unknown-field",
                dumps({**base(path), "x": "'; DROP TABLE ventas; --"}),
                True,
            )
        )
    if valid != "{}":
        # Being made strict right now (issue 11 §3): it wrote a sale.
        cases.append(Case(path, "trailing-comma", (valid[:-1] + ",}").encode()))
    return cases


# Digits of other scripts, 0 to 9: str.isdigit() is true for every one of them, and
# int(), float() and Decimal() read all but the superscripts, subscripts and circled ones.
DIGITS = {
    "arabic-indic": "٠١٢٣٤٥٦٧٨٩",
    "persian": "۰۱۲۳۴۵۶۷۸۹",
    "fullwidth": "０１２３４５６７８９",
    "superscript": "⁰¹²³⁴⁵⁶⁷⁸⁹",
    "subscript": "₀₁₂₃₄₅₆₇₈₉",
    "bengali": "০১২৩৪৫৬৭৮৯",
    "math-bold": "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗",
    "circled": "⓪①②③④⑤⑥⑦⑧⑨",
    "devanagari": "०१२३४५६७८९",
}
# An hour ago, as epoch seconds: a valid `ts` once its digits are ASCII.
AN_HOUR_AGO = str(int(time.time()) - 3600)


def lookalike(text: str, script: str) -> str:
    """`text` with its ASCII digits written in `script`."""
    return text.translate(str.maketrans("0123456789", DIGITS[script]))


SQL = {
    "drop-table": "'; DROP TABLE ventas; --",
    "or-true": "x' OR '1'='1",
    "percent": "%",
    "underscore": "_",
    "percent-at": "%@%",
    "like-email": "rel0_@example.com",
    "percent-email": "%@example.com",
    "backslash": "\\",
    "backslash-quote": "\\'",
    "semicolon": "; SELECT pg_sleep(10); --",
    "nul-escape": "\u0000",
    "nul-inside": "REL\u000001",
    "dollar-quote": "$$; DROP TABLE fans; $$",
    "comment": "REL01'--",
}
HUGE = {
    "1e308": "1e308",
    "1e400": "1e400",
    "-1e400": "-1e400",
    "2^63": str(2**63),
    "2^64+1": str(2**64 + 1),
    "40-digits": "9" * 40,
}
# Zero for a double: as an amount a 0-point sale, rightly written (docs/decisions.md: -0 is 0, and
# float noise under a millionth of a peso is rounded).
TINY = {"tiny": "1e-400", "neg-zero-exp": "-0e-999"}
WRONG_TYPES: dict[str, object] = {
    "number": 123,
    "true": True,
    "list": [],
    "list-of-text": ["REL01"],
    "object": {},
    "nested": {"fan": "REL01"},
}
# The JSON types a field takes (docs/requests.md): not hostile there.
TAKES = {"importe": {"number"}, "importe_centavos": {"number"}, "limite": {"number"}}


def wrong_types(field: str) -> dict[str, object]:
    return {
        name: value for name, value in WRONG_TYPES.items() if name not in TAKES.get(field, set())
    }


def tx_cases() -> list[Case]:
    cases: list[Case] = []
    for name in DIGITS:
        cases += [
            with_field(TX, "importe", lookalike("123", name), f"importe-{name}"),
            with_field(TX, "importe", lookalike("$ 1,234.56", name), f"importe-peso-{name}"),
            with_field(TX, "importe", "1" + lookalike("2.5", name) + "0", f"importe-mixed-{name}"),
            with_field(TX, "fan", "REL" + lookalike("01", name), f"fan-{name}"),
            with_field(TX, "ts", lookalike(AN_HOUR_AGO, name), f"ts-epoch-{name}"),
            with_field(TX, "ts", lookalike("2026-01-01T10:00:00Z", name), f"ts-iso-{name}"),
        ]
    cases += [
        with_field(TX, "fan", "ＲＥＬ０１", "fan-fullwidth-id"),
        with_field(TX, "importe", "٣٫٥", "importe-arabic-decimal-separator"),
        with_field(TX, "importe", "1\u00a0000", "importe-nbsp-thousands"),
    ]
    for name, sql in SQL.items():
        cases.append(with_field(TX, "fan", sql, f"fan-sql-{name}"))
        cases.append(with_field(TX, "importe", sql, f"importe-sql-{name}"))
        cases.append(
            Case(
                TX,
                f"id-sql-{name}",
                dumps({"id_externo": sql, "fan": "NO-SUCH-FAN", "importe": "10.00"}),
            )
        )
        cases.append(with_field(TX, "moneda", sql, f"moneda-sql-{name}"))
    for name, literal in TINY.items():
        cases.append(with_raw_field(TX, "ts", literal, f"ts-{name}"))
    for name, literal in HUGE.items():
        cases.append(with_raw_field(TX, "importe", literal, f"importe-{name}"))
        cases.append(with_raw_field(TX, "importe_centavos", literal, f"centavos-{name}"))
        cases.append(with_raw_field(TX, "ts", literal, f"ts-{name}"))
        cases.append(with_field(TX, "importe", literal, f"importe-text-{name}"))
    for literal in ("NaN", "Infinity", "-Infinity"):
        cases.append(with_raw_field(TX, "importe", literal, f"importe-{literal}"))
        cases.append(with_raw_field(TX, "importe_centavos", literal, f"centavos-{literal}"))
        cases.append(with_raw_field(TX, "ts", literal, f"ts-{literal}"))
        cases.append(with_field(TX, "importe", literal, f"importe-text-{literal}"))
        cases.append(with_field(TX, "ts", literal, f"ts-text-{literal}"))
    cases += [
        with_field(TX, "importe", "inf", "importe-text-inf"),
        with_field(TX, "importe", "1e5", "importe-text-exponent"),
        with_field(TX, "importe", "0x10", "importe-text-hex"),
        with_field(TX, "importe_centavos", 10.5, "centavos-fraction"),
        with_field(TX, "importe_centavos", -1000, "centavos-negative"),
        with_field(TX, "importe", -10, "importe-negative"),
        with_field(TX, "importe", "1" + "0" * 80, "importe-long-text"),
    ]
    for field in ("id_externo", "fan", "importe", "importe_centavos", "ts", "moneda", "terminal"):
        for name, value in wrong_types(field).items():
            cases.append(with_field(TX, field, value, f"{field}-{name}"))
    return cases


def redeem_cases() -> list[Case]:
    cases: list[Case] = []
    for name, sql in SQL.items():
        cases.append(with_field(REDEEM, "codigo", sql, f"codigo-sql-{name}"))
    cases += [
        with_field(REDEEM, "codigo", pattern, f"codigo-like-{n}")
        for n, pattern in enumerate(("C-0000_", "c-%", "C-%", "%0001", "C-00001%"))
    ]
    cases.append(
        Case(
            REDEEM,
            "batch-sql-and-like",
            dumps({"codigos": [*SQL.values(), "C-0000_", "C-%"]}),
            may_succeed=True,
        )
    )
    for name in DIGITS:
        cases.append(with_field(REDEEM, "codigo", lookalike(fresh_code(), name), f"codigo-{name}"))
        cases.append(with_field(REDEEM, "ts", lookalike(AN_HOUR_AGO, name), f"ts-epoch-{name}"))
    cases.append(with_field(REDEEM, "codigo", "Ｃ-００００１", "codigo-fullwidth-letters"))
    for name, literal in {
        **HUGE,
        **TINY,
        "NaN": "NaN",
        "Infinity": "Infinity",
        "-Infinity": "-Infinity",
    }.items():
        cases.append(with_raw_field(REDEEM, "ts", literal, f"ts-{name}"))
    for name, value in WRONG_TYPES.items():
        cases.append(with_field(REDEEM, "codigo", value, f"codigo-{name}"))
        cases.append(with_field(REDEEM, "ts", value, f"ts-{name}"))
        cases.append(with_field(REDEEM, "terminal", value, f"terminal-{name}"))
    code = fresh_code()
    cases += [
        Case(REDEEM, "codigos-lone-text", dumps({"codigos": fresh_code()})),
        Case(REDEEM, "codigos-number", dumps({"codigos": [1]})),
        Case(REDEEM, "codigos-null", dumps({"codigos": [fresh_code(), None]})),
        Case(REDEEM, "codigos-object", dumps({"codigos": {"a": fresh_code()}})),
        Case(REDEEM, "codigos-list-of-objects", dumps({"codigos": [{"codigo": fresh_code()}]})),
        # Being made strict right now (issue 11 §3): they redeemed the code.
        Case(REDEEM, "codigos-nested", dumps({"codigos": [[fresh_code()]]})),
        Case(REDEEM, "codigos-nested-deeper", dumps({"codigos": [[[fresh_code()]], []]})),
        Case(REDEEM, "codigo-and-codigos", dumps({"codigo": code, "codigos": [code]})),
        Case(REDEEM, "codigos-501", dumps({"codigos": [fresh_code()] * 501})),
    ]
    return cases


def resolve_cases() -> list[Case]:
    cases: list[Case] = []
    for name, sql in SQL.items():
        cases.append(with_field(RESOLVE, "fan", sql, f"fan-sql-{name}"))
    for name in DIGITS:
        cases.append(with_field(RESOLVE, "fan", "REL" + lookalike("01", name), f"fan-{name}"))
    cases += [
        with_field(RESOLVE, "fan", "ＲＥＬ０１", "fan-fullwidth-id"),
        with_field(RESOLVE, "fan", "https://rel.example/fan/v/%", "fan-qr-url-percent"),
        with_field(RESOLVE, "fan", "qrREL0_", "fan-qr-like"),
    ]
    for name, value in WRONG_TYPES.items():
        cases.append(with_field(RESOLVE, "fan", value, f"fan-{name}"))
    return cases


def codes_cases() -> list[Case]:
    cases: list[Case] = []
    for name, sql in SQL.items():
        cases.append(with_field(CODES, "promo", sql, f"promo-sql-{name}"))
    cases += [
        with_field(CODES, "promo", pattern, f"promo-like-{n}")
        for n, pattern in enumerate(("Rel%", "Rel_Promo", "rel promo%", "_el Promo"))
    ]
    for name in DIGITS:  # the promotion's id is 1
        cases.append(with_field(CODES, "promo", lookalike("1", name), f"promo-id-{name}"))
    cases.append(with_field(CODES, "promo", "Ｒｅｌ Ｐｒｏｍｏ", "promo-fullwidth-name"))
    for name, literal in {
        **HUGE,
        **TINY,
        "NaN": "NaN",
        "Infinity": "Infinity",
        "-Infinity": "-Infinity",
        "fraction": "1.5",
        "negative": "-1",
        "zero": "0",
    }.items():
        cases.append(with_raw_field(CODES, "promo", literal, f"promo-{name}"))
    for name, value in WRONG_TYPES.items():
        cases.append(with_field(CODES, "promo", value, f"promo-{name}"))
    cases += [
        with_field(CODES, "codigos", ["'; DROP TABLE codigos; --"], "codigos-sql-spaces"),
        with_field(CODES, "codigos", ["A\u0000B"], "codigos-nul"),
        with_field(CODES, "codigos", "A B\u0000C", "codigos-text-nul"),
        with_field(CODES, "codigos", [["NESTED-1"]], "codigos-nested"),
        with_field(CODES, "codigos", [1], "codigos-number"),
        with_field(CODES, "codigos", {"a": "OBJ-1"}, "codigos-object"),
        with_field(CODES, "codigos", ["X" * 65], "codigos-too-long"),
        with_field(CODES, "codigos", [f"MANY-{i}" for i in range(5001)], "codigos-5001"),
        with_field(CODES, "codigos", ["OK-1", "bad\tcode"], "codigos-one-bad"),
    ]
    return cases


def roster_cases() -> list[Case]:
    cases: list[Case] = []
    for name, sql in SQL.items():
        cases.append(with_field(ROSTER, "desde", sql, f"desde-sql-{name}"))
    for name in DIGITS:
        cases.append(with_field(ROSTER, "desde", lookalike("123", name), f"desde-{name}"))
        cases.append(with_field(ROSTER, "limite", lookalike("10", name), f"limite-text-{name}"))
    for name, literal in {
        **HUGE,
        **TINY,
        "NaN": "NaN",
        "Infinity": "Infinity",
        "-Infinity": "-Infinity",
        "fraction": "0.5",
        "negative": "-1",
    }.items():
        big = name in ("1e308", "2^63", "2^64+1", "40-digits")
        limite = with_raw_field(ROSTER, "limite", literal, f"limite-{name}")
        # Above 2000 is served as 2000 (docs/roster.md).
        cases.append(Case(ROSTER, limite.name, limite.body, may_succeed=big))
        cases.append(with_raw_field(ROSTER, "desde", literal, f"desde-{name}"))
    for field in ("desde", "limite"):
        for name, value in wrong_types(field).items():
            cases.append(with_field(ROSTER, field, value, f"{field}-{name}"))
    return cases


def ping_cases() -> list[Case]:
    return [
        Case(PING, f"field-{name}", dumps({"x": value}), may_succeed=True)
        for name, value in {**SQL, **WRONG_TYPES}.items()
    ]


ISSUE_11_3 = {
    "tx-trailing-comma",
    "redeem-trailing-comma",
    "resolve-trailing-comma",
    "codes-trailing-comma",
    "roster-trailing-comma",
    "redeem-codigos-nested",
    "redeem-codigos-nested-deeper",
    "codes-codigos-nested",
}


def all_cases() -> list[Case]:
    return [
        *(case for path in ENDPOINTS for case in generic(path)),
        *tx_cases(),
        *redeem_cases(),
        *resolve_cases(),
        *codes_cases(),
        *roster_cases(),
        *ping_cases(),
    ]


CASES = all_cases()


def test_case_names_are_unique():
    assert len({case.id for case in CASES}) == len(CASES)


def fingerprint(stack: Stack) -> tuple[object, ...]:
    """Everything a write could change. (Not the wallet outbox: the sender empties it.)"""
    with stack.engine.connect() as conn:
        return tuple(
            conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM ventas), (SELECT count(*) FROM movimientos),"
                    " (SELECT count(*) FROM codigos),"
                    " (SELECT count(*) FROM codigos WHERE estado <> 'asignado'),"
                    " (SELECT count(*) FROM promos), (SELECT count(*) FROM fans),"
                    " (SELECT sum(puntos) FROM fans), (SELECT count(*) FROM claves)"
                )
            ).one()
        )


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[Client]:
    with Client(stack.base_url, Journal()) as client:
        yield client


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_body(stack: Stack, client: Client, case: Case):
    before = fingerprint(stack)
    body = case.body if isinstance(case.body, bytes) else case.body()
    attempt, _ = client.send(case.path, body, {"Content-Type": "application/json"})
    after = fingerprint(stack)
    assert attempt.status is not None, f"no answer: {attempt.error}"
    assert attempt.status < 500, f"{attempt.status} {attempt.body}"
    assert attempt.error is None, f"{attempt.error}: {attempt.status} {attempt.body}"
    if not case.may_succeed:
        assert attempt.status != 200, f"accepted: {attempt.body}"
    assert after == before, f"written ({attempt.status} {attempt.body}): {before} -> {after}"
