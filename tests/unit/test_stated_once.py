"""Rules of the domain stated once and derived elsewhere (issue 26 §3): the keys'
prefixes, the currency an amount may carry, how a detalle shows a client's value. Each
test fails when a copy is typed again and drifts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loyalty_grpc.domain import amounts, detalle, fixture, keys, roster, timestamps
from loyalty_grpc.domain.errors import LoyaltyError
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION

DOMAIN = Path(__file__).resolve().parents[2] / "src" / "loyalty_grpc" / "domain"


@pytest.mark.parametrize("modo", list(keys.Modo))
def test_a_key_is_read_by_its_prefix(modo: keys.Modo) -> None:
    prefix = keys.PREFIJOS[modo]
    assert keys.mode_of(prefix + "A" * keys.MIN_SECRET_LENGTH) is modo
    assert keys.mode_of(prefix + "A" * (keys.MIN_SECRET_LENGTH - 1)) is None
    with pytest.raises(LoyaltyError) as refused:
        keys.require_well_formed("no es una clave")
    assert f"'{prefix}'" in refused.value.detalle
    assert f"{keys.MIN_SECRET_LENGTH} o más" in refused.value.detalle
    # A fixture never shows a text that carries a key's prefix (keys are secrets).
    assert fixture._show(f"x{prefix}y") == "(valor oculto)"


def test_the_prefixes_are_typed_only_in_keys() -> None:
    typed = {
        path.name
        for path in DOMAIN.glob("*.py")
        for prefix in keys.PREFIJOS.values()
        if prefix in path.read_text(encoding="utf-8") and path.name != "keys.py"
    }
    assert typed <= {"secret_strength.py"}  # its module doc, prose


def test_the_programs_currency_is_the_one_an_amount_may_carry() -> None:
    assert MONEDA_POR_OMISION in amounts.DELANTE
    assert amounts.DETRAS == (MONEDA_POR_OMISION,)
    for symbol in amounts.DELANTE:
        assert amounts.parse_importe(f"{symbol} 12.50") == 1250
        assert amounts.parse_importe(f"{symbol.lower()}12.50") == 1250
    assert amounts.parse_importe(f"12.50 {MONEDA_POR_OMISION}") == 1250
    with pytest.raises(LoyaltyError) as refused:
        amounts.parse_importe("USD 12.50")
    assert '("$", "MX$" o "MXN" delante, o "MXN" detrás)' in refused.value.detalle


def test_a_long_number_is_shortened_like_any_value() -> None:
    assert detalle.shown_number(12.5) == "12.5"
    long = detalle.shown_number(10**40)
    assert long.endswith(detalle.ELLIPSIS)
    assert len(long) == detalle.MAX_SHOWN + len(detalle.ELLIPSIS)
    with pytest.raises(LoyaltyError) as refused:
        amounts.parse_centavos(10**40 + 0.5)
    assert refused.value.detalle.startswith(f"importe_centavos: {detalle.shown_number(1e40)}")


@pytest.mark.parametrize(
    ("parse", "limit"),
    [
        (amounts.parse_importe, amounts.MAX_TEXTO),
        (lambda text: timestamps.parse_ts(text, datetime.now(UTC)), timestamps.MAX_TEXTO),
        (roster.parse_limite, roster.MAX_LIMITE_TEXTO),
    ],
)
def test_a_text_too_long_is_described_by_its_length(parse: object, limit: int) -> None:
    text = "1" * (limit + 1)
    with pytest.raises(LoyaltyError) as refused:
        parse(text)  # type: ignore[operator]
    assert detalle.too_long(limit + 1, limit) in refused.value.detalle


def test_a_client_value_is_shown_only_through_detalle() -> None:
    """No domain module writes a client's value with repr() (`!r`) or words the length
    rule itself: `shown`, `shown_number` and `too_long` are the one way."""
    found = []
    for path in sorted(DOMAIN.glob("*.py")):
        if path.name == "detalle.py":
            continue
        text = path.read_text(encoding="utf-8")
        if "demasiado largo" in text:
            found.append(f"{path.name}: too_long")
        found += [f"{path.name}: {m}" for m in re.findall(r"\{(\w+)!r\}", text)]
    assert found == []


def test_the_catalogue_quotes_the_limits_of_their_modules() -> None:
    from loyalty_grpc.domain import codes, rate_limit, redeem
    from loyalty_grpc.domain.errors import CATALOGO, CodigoError

    cuando = {codigo: entrada.cuando for codigo, entrada in CATALOGO.items()}
    hours = timestamps.MAX_ADELANTO // timedelta(hours=1)
    assert f"more than {hours} h in the future" in cuando[CodigoError.TS_INVALIDO]
    assert cuando[CodigoError.DEMASIADOS_CODIGOS] == (
        f"more than {redeem.MAX_CODIGOS} in `redeem`, more than "
        f"{codes.MAX_CODES_PER_CALL} in `codes`"
    )
    assert cuando[CodigoError.CODIGO_INVALIDO].count(f"over {codes.MAX_CODE_LENGTH} chars") == 2
    assert f"({MONEDA_POR_OMISION})" in cuando[CodigoError.MONEDA_NO_SOPORTADA]
    calls = f"over {rate_limit.DEFAULT_CALLS_PER_MINUTE} calls in a minute"
    assert calls in cuando[CodigoError.DEMASIADAS_LLAMADAS]
    prefixes = "/".join(f"`{p}`" for p in keys.PREFIJOS.values())
    assert (
        f"{prefixes} prefix and {keys.MIN_SECRET_LENGTH}+" in cuando[CodigoError.CLAVE_MAL_FORMADA]
    )
