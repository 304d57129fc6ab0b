"""Pure back-office rules: Fan IDs, e-mails, QR tokens, codes, states and transitions,
program settings, dates and text fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal

import pytest

from loyalty_grpc.domain import fans, programs, promos, text
from loyalty_grpc.domain.codes import normalize_code
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo


def _codigo(fn: Callable[..., object], *args: object) -> tuple[CodigoError, str]:
    with pytest.raises(LoyaltyError) as err:
        fn(*args)
    return err.value.codigo, err.value.detalle


# ---------------------------------------------------------------- Fan ID


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("hal0001", "HAL0001"),
        ("  hal 0001 ", "HAL0001"),
        ("h a\tl\n0\u00a00\u20030 1", "HAL0001"),  # every kind of whitespace
        ("HAL-0001", "HAL-0001"),
    ],
)
def test_canonical_fan_id(raw, canonical):
    assert fans.canonical_fan_id(raw) == canonical
    assert fans.canonical_fan_id(canonical) == canonical  # idempotent


# Letters and digits that look like ASCII ones (upper()/lower() fold the first three into
# ASCII) and invisible characters: issue 22 §5.
LOOK_ALIKES = [
    "otro\u017fi01",  # ſ long s → S
    "hal\u01310001",  # ı dotless i → I
    "\u212aIKI01",  # K Kelvin sign → k
    "\uff28AL0001",  # Ｈ fullwidth
    "HAL\uff10001",  # ０ fullwidth zero
    "\u0410\u0415\u041e\u0420\u0421\u0425",  # Cyrillic А Е О Р С Х
    "HAL\u200b0001",  # zero-width space (not whitespace for Python's \s)
    "HAL0001\u200d",  # zero-width joiner
    "\ufeffHAL0001",  # zero-width no-break space (BOM)
    "ñandú7",
]


@pytest.mark.parametrize("raw", LOOK_ALIKES)
def test_a_fan_id_is_ascii(raw):
    codigo, detalle = _codigo(fans.canonical_fan_id, raw, "id")
    assert codigo is CodigoError.SOLICITUD_INVALIDA
    assert detalle.startswith("id: un Fan ID solo lleva caracteres ASCII")
    assert raw not in detalle  # personal data is not echoed
    assert raw.upper() not in detalle
    assert _codigo(fans.new_fan_id, raw)[0] is CodigoError.SOLICITUD_INVALIDA


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_canonical_fan_id_empty(raw):
    codigo, detalle = _codigo(fans.canonical_fan_id, raw)
    assert codigo is CodigoError.CAMPO_REQUERIDO
    assert detalle.startswith("fan_id")
    assert _codigo(fans.canonical_fan_id, raw, "id")[1].startswith("id:")


def test_new_fan_id_refuses_what_the_api_would_misread():
    assert fans.new_fan_id(" hal 1 ") == "HAL1"
    for raw in ("ana@example.com", "https://x/v/1", "a/b"):
        codigo, detalle = _codigo(fans.new_fan_id, raw)
        assert codigo is CodigoError.SOLICITUD_INVALIDA
        assert detalle.startswith("id:")
    assert _codigo(fans.new_fan_id, " ")[0] is CodigoError.CAMPO_REQUERIDO


# ---------------------------------------------------------------- e-mail


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("ana@example.com", "ana@example.com"),
        ("  Ana@Example.COM ", "Ana@Example.COM"),  # case kept as given
        ("a+b.c@sub.example.mx", "a+b.c@sub.example.mx"),
    ],
)
def test_normalize_email(raw, normal):
    assert fans.normalize_email(raw) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "ana",
        "@example.com",
        "ana@",
        "ana@@example.com",
        "a@b@c",
        "ana @example.com",
        "ana@exa mple.com",
    ],
)
def test_normalize_email_invalid(raw):
    codigo, detalle = _codigo(fans.normalize_email, raw)
    assert codigo is CodigoError.SOLICITUD_INVALIDA
    assert detalle.startswith("correo:")
    if raw.strip():
        assert raw.strip() not in detalle  # personal data is not echoed


def test_email_comparison_is_case_insensitive():
    assert fans.email_key("Ana@Example.COM") == "ana@example.com"
    assert fans.emails_equal("Ana@Example.com", "ana@example.COM")
    assert not fans.emails_equal("ana@example.com", "ana2@example.com")


@pytest.mark.parametrize(
    ("look_alike", "ascii"),
    [
        ("\u212aiki@example.com", "kiki@example.com"),  # K Kelvin sign: lower() is k
        ("k\u0131k\u0131@example.com", "kiki@example.com"),  # ı: upper() is I
        ("\u0130van@example.com", "ivan@example.com"),  # İ: lower() is i + dot
        ("\u017fara@example.com", "sara@example.com"),  # ſ: upper() is S
        ("\uff4biki@example.com", "kiki@example.com"),  # ｋ fullwidth
        ("\u043aiki@example.com", "kiki@example.com"),  # к Cyrillic
        ("ki\u200bki@example.com", "kiki@example.com"),  # zero-width space
        ("kiki@example.com\ufeff", "kiki@example.com"),
    ],
)
def test_email_comparison_never_folds_other_letters_into_ascii(look_alike, ascii):
    assert not fans.emails_equal(look_alike, ascii)
    assert fans.email_key(look_alike) != ascii


def test_email_letters_beyond_ascii_compare_exactly():
    assert fans.email_key("JOSÉ@Example.com") == "josÉ@example.com"
    assert not fans.emails_equal("josé@example.com", "JOSÉ@example.com")
    assert fans.emails_equal("josé@EXAMPLE.com", "JOSé@example.com")


# ---------------------------------------------------------------- other fan fields


def test_qr_token():
    assert fans.check_qr_token(" q7Hk2Pz ") == "q7Hk2Pz"  # case kept
    assert fans.check_qr_token("a.b_c~d-E") == "a.b_c~d-E"
    assert _codigo(fans.check_qr_token, "")[0] is CodigoError.CAMPO_REQUERIDO
    for bad in ("a b", "a/b", "a?b", "ñ"):
        assert _codigo(fans.check_qr_token, bad)[0] is CodigoError.SOLICITUD_INVALIDA


def test_socio_desde_and_temporadas():
    assert fans.check_socio_desde(1900) == 1900
    assert fans.check_socio_desde(2100) == 2100
    for bad in (0, 1899, 2101):
        codigo, detalle = _codigo(fans.check_socio_desde, bad)
        assert codigo is CodigoError.SOLICITUD_INVALIDA
        assert detalle.startswith("socio_desde:")
    assert fans.check_temporadas(0) == 0
    assert _codigo(fans.check_temporadas, -1)[0] is CodigoError.SOLICITUD_INVALIDA


# ---------------------------------------------------------------- codes


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("hd-0001", "HD-0001"),
        ("  Hd-0001\t", "HD-0001"),
        ("HD 0001", "HD 0001"),
        ("hd-d\u0131sp-0001", "HD-D\u0131SP-0001"),  # ı stays ı: never HD-DISP-0001
        ("\u212aiki", "\u212aIKI"),
    ],
)
def test_normalize_code(raw, normal):
    assert normalize_code(raw) == normal


def test_normalize_code_empty():
    assert _codigo(normalize_code, "  ")[0] is CodigoError.CAMPO_REQUERIDO


# ---------------------------------------------------------------- states


def test_state_values_are_the_contract_words():
    assert [e.value for e in EstadoPromo] == ["activa", "pausada", "terminada"]
    assert [e.value for e in EstadoCodigo] == ["disponible", "asignado", "canjeado", "liberado"]
    assert [e.value for e in EstadoFan] == ["activo", "baja"]


def test_parse_estados():
    assert promos.parse_estado_promo(" Pausada ") is EstadoPromo.PAUSADA
    assert promos.parse_estado_codigo("asignado") is EstadoCodigo.ASIGNADO
    assert promos.parse_estado_fan("BAJA") is EstadoFan.BAJA
    for parse in (promos.parse_estado_promo, promos.parse_estado_codigo, promos.parse_estado_fan):
        codigo, detalle = _codigo(parse, "otro")
        assert codigo is CodigoError.SOLICITUD_INVALIDA
        assert detalle.startswith("estado:")


_CODE_MOVES = {
    (EstadoCodigo.DISPONIBLE, EstadoCodigo.ASIGNADO),
    (EstadoCodigo.DISPONIBLE, EstadoCodigo.LIBERADO),
    (EstadoCodigo.ASIGNADO, EstadoCodigo.LIBERADO),
}


@pytest.mark.parametrize("actual", list(EstadoCodigo))
@pytest.mark.parametrize("nuevo", list(EstadoCodigo))
def test_code_transitions(actual, nuevo):
    if (actual, nuevo) in _CODE_MOVES:
        promos.check_transicion_codigo("HD-1", actual, nuevo)
    else:
        codigo, detalle = _codigo(promos.check_transicion_codigo, "HD-1", actual, nuevo)
        assert codigo is CodigoError.TRANSICION_INVALIDA
        assert "HD-1" in detalle
        assert f"estado actual {actual.value}" in detalle


_PROMO_MOVES = {
    (EstadoPromo.ACTIVA, EstadoPromo.PAUSADA),
    (EstadoPromo.PAUSADA, EstadoPromo.ACTIVA),
    (EstadoPromo.ACTIVA, EstadoPromo.TERMINADA),
    (EstadoPromo.PAUSADA, EstadoPromo.TERMINADA),
} | {(e, e) for e in EstadoPromo}


@pytest.mark.parametrize("actual", list(EstadoPromo))
@pytest.mark.parametrize("nuevo", list(EstadoPromo))
def test_promo_transitions(actual, nuevo):
    if (actual, nuevo) in _PROMO_MOVES:
        promos.check_transicion_promo("2x1", actual, nuevo)
    else:
        codigo, detalle = _codigo(promos.check_transicion_promo, "2x1", actual, nuevo)
        assert codigo is CodigoError.TRANSICION_INVALIDA
        assert "estado actual terminada" in detalle


def test_fan_transitions():
    promos.check_transicion_fan("F", EstadoFan.ACTIVO, EstadoFan.BAJA)
    promos.check_transicion_fan("F", EstadoFan.BAJA, EstadoFan.ACTIVO)
    for estado in EstadoFan:
        codigo, detalle = _codigo(promos.check_transicion_fan, "F", estado, estado)
        assert codigo is CodigoError.TRANSICION_INVALIDA
        assert f"estado actual {estado.value}" in detalle


def test_fecha_and_puntos_canje():
    assert promos.parse_fecha(" 2099-12-31 ") == date(2099, 12, 31)
    assert _codigo(promos.parse_fecha, "")[0] is CodigoError.CAMPO_REQUERIDO
    for bad in ("2099-13-01", "31/12/2099", "20991231", "2099-W01-1", "2099-12-31T00:00"):
        codigo, detalle = _codigo(promos.parse_fecha, bad)
        assert codigo is CodigoError.SOLICITUD_INVALIDA
        assert detalle.startswith("vigencia_fin:")
    assert promos.check_puntos_canje(0) == 0
    assert _codigo(promos.check_puntos_canje, -1)[0] is CodigoError.SOLICITUD_INVALIDA


# ---------------------------------------------------------------- programs and text


def test_program_settings():
    assert programs.program_id(" halcones-2_b ") == "halcones-2_b"
    assert _codigo(programs.program_id, "")[0] is CodigoError.CAMPO_REQUERIDO
    for bad in ("Halcones", "-x", "a b", "a.b"):
        assert _codigo(programs.program_id, bad)[0] is CodigoError.SOLICITUD_INVALIDA
    assert programs.parse_tasa("0.1") == Decimal("0.1")
    assert programs.parse_tasa("0") == Decimal(0)
    assert programs.parse_tasa("0.000001") == Decimal("0.000001")
    assert _codigo(programs.parse_tasa, " ")[0] is CodigoError.CAMPO_REQUERIDO
    for bad in ("x", "-1", "0.0000001", "1000000", "NaN", "Infinity", "1e400"):
        assert _codigo(programs.parse_tasa, bad)[0] is CodigoError.SOLICITUD_INVALIDA, bad
    assert programs.format_tasa(Decimal("0.100000")) == "0.1"
    assert programs.format_tasa(Decimal("10.000000")) == "10"
    assert programs.format_tasa(Decimal("0E-6")) == "0"
    assert programs.check_qr_url("") == ""
    assert programs.check_qr_url(" https://x.example/fan ") == "https://x.example/fan"
    assert _codigo(programs.check_qr_url, "ftp://x")[0] is CodigoError.SOLICITUD_INVALIDA
    assert programs.check_moneda("") == "MXN"
    assert programs.check_moneda("usd") == "USD"
    assert _codigo(programs.check_moneda, "PESOS")[0] is CodigoError.SOLICITUD_INVALIDA


def test_text_fields():
    assert text.single_line("  Ana  ", "nombre") == "Ana"
    assert _codigo(text.single_line, " ", "nombre") == (
        CodigoError.CAMPO_REQUERIDO,
        "nombre: vacío",
    )
    assert text.single_line("", "x", required=False) == ""
    assert _codigo(text.single_line, "a\nb", "nombre")[0] is CodigoError.SOLICITUD_INVALIDA
    assert text.multi_line(" a\nb\tc ", "descripcion") == "a\nb\tc"
    assert _codigo(text.multi_line, "a\x00b", "descripcion")[0] is CodigoError.SOLICITUD_INVALIDA
