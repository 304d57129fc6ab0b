"""Code text rules (domain.codes): normalisation, validity, splitting of pasted text and of
a streamed file, the per-call limit, the promotion reference."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loyalty_grpc.domain.codes import (
    MAX_CODE_LENGTH,
    MAX_CODES_PER_CALL,
    PromoRef,
    check_new_code,
    code_batch,
    code_batch_of_json,
    code_batch_of_list,
    code_text,
    parse_promo_ref,
    several_codes,
    split_code_stream,
    split_codes,
)
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.fixture import parse_fixture


def error_of(fn, *args, **kwargs) -> LoyaltyError:
    with pytest.raises(LoyaltyError) as caught:
        fn(*args, **kwargs)
    return caught.value


# ---------------------------------------------------------------- splitting pasted text


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("A1, a2;A3\n\tA4  a1", ["A1", "a2", "A3", "A4", "a1"]),
        ("  ,;\n", []),
        ("", []),
        ("X", ["X"]),
        (",,A;;B,\r\nC\u00a0D\u2003E\u2028F", ["A", "B", "C", "D", "E", "F"]),
        ("hd-001;HD-002 ; hd-003 ,", ["hd-001", "HD-002", "hd-003"]),
    ],
)
def test_split_codes(text, pieces):
    assert split_codes(text) == pieces


def test_pasted_text_example_of_the_brief():
    batch = code_batch_of_json("A1, a2;A3\n\tA4  a1")
    assert batch.codigos == ("A1", "A2", "A3", "A4")
    assert batch.leidos == 5


_ALPHABET = st.sampled_from(list("ab1-_ ,;\n\t\u00a0Zñ"))


@given(
    text=st.text(alphabet=_ALPHABET, max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=12),
)
def test_streamed_split_equals_split_whatever_the_chunk_boundaries(text, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert list(split_code_stream(chunks)) == split_codes(text)


def test_streamed_split_bounds_an_over_long_piece():
    chunks = ["ok1 ", "X" * 100, "X" * 100, "X" * 100, " ok2,", "Y" * 10, ";ok3"]
    pieces = list(split_code_stream(chunks, max_piece=150))
    assert pieces == ["ok1", "X" * 150, "ok2", "Y" * 10, "ok3"]
    # a single chunk holding the whole over-long piece and a piece that ends the text
    assert list(split_code_stream(["a " + "Z" * 500], max_piece=20)) == ["a", "Z" * 20]


# ---------------------------------------------------------------- validity


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("hd-0001", "HD-0001"),
        ("  x7 ", "X7"),
        ("A" * MAX_CODE_LENGTH, "A" * MAX_CODE_LENGTH),
        ("~!#$%&'()*+-./:<=>?@[]^_`{|}", "~!#$%&'()*+-./:<=>?@[]^_`{|}"),
    ],
)
def test_valid_new_codes(raw, normal):
    assert check_new_code(raw) == normal


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("", "vacío"),
        ("   ", "vacío"),
        ("A" * (MAX_CODE_LENGTH + 1), "más de 64 caracteres (65)"),
        ("AB\x07C", "caracteres de control"),
        ("AB\x00", "caracteres de control"),
        ("AB\x85C", "caracteres de control"),
        ("AB CD", "separan códigos"),
        ("AB,CD", "separan códigos"),
        ("AB;CD", "separan códigos"),
    ],
)
def test_invalid_new_codes(raw, problem):
    error = error_of(check_new_code, raw, "codigo")
    assert error.codigo is CodigoError.CODIGO_INVALIDO
    assert error.detalle.startswith("codigo: ")
    assert problem in error.detalle


# Look-alikes of ASCII letters and digits, and invisible characters (issue 22 §5): Python's
# upper() made `hd-dısp-0001` the code HD-DISP-0001.
LOOK_ALIKES = [
    "hd-d\u0131sp-0001",  # ı dotless i: upper() → I
    "otro\u017fi01",  # ſ long s: upper() → S
    "\u212aIKI-01",  # K Kelvin sign: lower() → k
    "\uff24EMO-0001",  # Ｄ fullwidth D
    "DEMO-\uff10001",  # ０ fullwidth zero
    "\u0410\u0415\u041e\u0420\u0421\u0425-1",  # Cyrillic А Е О Р С Х
    "HD-\u200b0001",  # zero-width space
    "HD-0001\u200d",  # zero-width joiner
    "\ufeffHD-0001",  # byte order mark / zero-width no-break space
    "ñandú",
]


@pytest.mark.parametrize("raw", LOOK_ALIKES)
def test_a_new_code_is_ascii(raw):
    error = error_of(check_new_code, raw, "codigo")
    assert error.codigo is CodigoError.CODIGO_INVALIDO
    assert "no son ASCII" in error.detalle


@pytest.mark.parametrize("raw", LOOK_ALIKES)
def test_case_changes_never_fold_a_look_alike_into_ascii(raw):
    normal = code_text(raw)
    assert not normal.isascii()
    assert normal == raw.strip().translate(
        str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    )


def test_a_look_alike_in_a_batch_is_named_escaped():
    error = error_of(code_batch_of_json, ["HD-0001", "hd-d\u0131sp-0001"])
    assert error.codigo is CodigoError.CODIGO_INVALIDO
    assert 'codigos[1] "HD-D\\u0131SP-0001": contiene caracteres que no son ASCII' in error.detalle


# ---------------------------------------------------------------- a batch


def test_array_batch_normalises_and_removes_repeats_in_first_seen_order():
    batch = code_batch_of_json([" b2", "A1", "a1 ", "B2", "c3"])
    assert batch.codigos == ("B2", "A1", "C3")
    assert batch.leidos == 5


def test_array_element_with_a_separator_is_invalid_not_split():
    error = error_of(code_batch_of_json, ["A1", "B2 C3"])
    assert error.codigo is CodigoError.CODIGO_INVALIDO
    assert 'codigos[1] "B2 C3"' in error.detalle


def test_invalid_codes_are_named_by_position_first_three_and_a_count():
    items = ["OK", "", "X" * 70, "A\x01", "B\x02", "fine", " "]
    error = error_of(code_batch_of_json, items, "codes")
    assert error.codigo is CodigoError.CODIGO_INVALIDO
    assert error.detalle.startswith("5 código(s) no válido(s), no se agregó ninguno: ")
    assert 'codes[1] "": vacío' in error.detalle
    assert 'codes[2] "' + "X" * 32 + '"…: más de 64 caracteres (70)' in error.detalle
    assert 'codes[3] "A\\u0001": contiene caracteres de control' in error.detalle
    assert error.detalle.endswith("(y 2 más)")
    assert "\n" not in error.detalle


def test_invalid_pasted_codes_are_named_by_their_place_in_the_text():
    error = error_of(code_batch_of_json, "A, B\x07, " + "Z" * 65)
    assert 'codigos: código 2 del texto "B\\u0007"' in error.detalle
    assert "codigos: código 3 del texto" in error.detalle
    shifted = error_of(code_batch, ["OK", "B\x07"], "archivo", pasted=True, start=10000)
    assert "archivo: código 10002 del texto" in shifted.detalle


def test_limit_counts_entries_read_repeats_included():
    assert code_batch_of_json(["A"] * MAX_CODES_PER_CALL).codigos == ("A",)
    for too_many in (
        ["A"] * (MAX_CODES_PER_CALL + 1),
        " ".join(f"C{i}" for i in range(MAX_CODES_PER_CALL + 1)),
    ):
        error = error_of(code_batch_of_json, too_many)
        assert error.codigo is CodigoError.DEMASIADOS_CODIGOS
        assert "5000" in error.detalle


def test_limit_is_checked_before_validity():
    assert (
        error_of(code_batch_of_json, [""] * (MAX_CODES_PER_CALL + 1)).codigo
        is CodigoError.DEMASIADOS_CODIGOS
    )


@pytest.mark.parametrize(
    ("value", "codigo", "hint"),
    [
        ([], CodigoError.CAMPO_REQUERIDO, "codigos: no trae ningún código"),
        (" ,; ", CodigoError.CAMPO_REQUERIDO, "codigos: no trae ningún código"),
        (["A", 5.0], CodigoError.SOLICITUD_INVALIDA, "codigos[1]: debe ser texto, llegó un número"),
        (["A", None], CodigoError.SOLICITUD_INVALIDA, "codigos[1]: debe ser texto, llegó null"),
        (["A", ["B"]], CodigoError.SOLICITUD_INVALIDA, "codigos[1]"),
        (5.0, CodigoError.SOLICITUD_INVALIDA, "debe ser una lista de textos o un texto"),
        ({"a": "b"}, CodigoError.SOLICITUD_INVALIDA, "llegó un objeto"),
        (True, CodigoError.SOLICITUD_INVALIDA, "llegó un booleano"),
    ],
)
def test_batch_shape_errors(value, codigo, hint):
    error = error_of(code_batch_of_json, value)
    assert error.codigo is codigo
    assert hint in error.detalle


def test_list_batch_takes_each_element_whole():
    assert code_batch_of_list(["a", "A", "b"]).codigos == ("A", "B")
    assert error_of(code_batch_of_list, ["a b"]).codigo is CodigoError.CODIGO_INVALIDO


# ---------------------------------------------------------------- promotion reference


@pytest.mark.parametrize(
    ("value", "ref"),
    [
        (7.0, PromoRef(7, None)),
        (7, PromoRef(7, None)),
        ("7", PromoRef(7, "7")),
        (" 12 ", PromoRef(12, "12")),
        ("2x1 Hot Dog", PromoRef(None, "2x1 Hot Dog")),
        ("  Verano  ", PromoRef(None, "Verano")),
        ("99999999999", PromoRef(None, "99999999999")),
    ],
)
def test_promo_ref(value, ref):
    assert parse_promo_ref(value) == ref


@pytest.mark.parametrize(
    ("value", "codigo"),
    [
        (7.5, CodigoError.SOLICITUD_INVALIDA),
        (True, CodigoError.SOLICITUD_INVALIDA),
        (["7"], CodigoError.SOLICITUD_INVALIDA),
        ({"id": 7}, CodigoError.SOLICITUD_INVALIDA),
        (0, CodigoError.PROMO_NO_ENCONTRADA),
        (-3.0, CodigoError.PROMO_NO_ENCONTRADA),
        (2.0**40, CodigoError.PROMO_NO_ENCONTRADA),
        ("  ", CodigoError.CAMPO_REQUERIDO),
    ],
)
def test_promo_ref_errors(value, codigo):
    error = error_of(parse_promo_ref, value, "promo_id")
    assert error.codigo is codigo
    assert error.detalle.startswith("promo_id:")


# ---------------------------------------------------------------- one source: fixtures


def _fixture_with_code(codigo: str) -> str:
    return (
        '{"programas": [{"id": "p", "nombre": "P", "tasa_puntos": "1", "promos": [{'
        '"nombre": "X", "vigencia_fin": "2099-01-01", "codigos": [{"codigo": '
        f'"{codigo}"}}]}}]}}]}}'
    )


def test_fixture_codes_follow_the_same_rules():
    fixture = parse_fixture(_fixture_with_code(" hd-1 "))
    assert fixture.programas[0].promos[0].codigos[0].codigo == "HD-1"
    for bad, problem in (
        ("A B", "separan códigos"),
        ("A\\u0007", "caracteres de control"),
        ("X" * 65, "más de 64"),
    ):
        error = error_of(parse_fixture, _fixture_with_code(bad))
        assert error.codigo is CodigoError.FIXTURE_INVALIDO
        assert problem in error.detalle


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("HD-0101, HD-0102", 2),
        ("HD-0101;HD-0102;HD-0103", 3),
        ("HD-0101 HD-0102", 2),  # spaces, pieces of one length
        ("HD-0101\tHD-0102", 2),
        ("A,B", 2),
        ("HD-0101", 0),  # one code
        ("HD 0101", 0),  # spaces, pieces of different lengths: one code typed with a space
        ("HD-0101,", 0),  # one piece
        ("HD-0101, HD-é", 0),  # a piece that is no code
        ("", 0),
    ],
)
def test_several_codes_in_one_text(text: str, count: int) -> None:
    assert several_codes(text) == count
