"""The pure redeem rules: the state table, the choice among copies of one text, repeats in
a batch, the batch limit, the summary and the single form's errors."""

from __future__ import annotations

import pytest

from loyalty_grpc.domain.codes import code_text
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import (
    MAX_CODIGOS,
    Copia,
    Desenlace,
    Paso,
    Resumen,
    check_batch_size,
    choose,
    could_exist,
    plan,
    summarize,
)

A, C, L, D = (
    EstadoCodigo.ASIGNADO,
    EstadoCodigo.CANJEADO,
    EstadoCodigo.LIBERADO,
    EstadoCodigo.DISPONIBLE,
)


@pytest.mark.parametrize(
    ("estado", "desenlace", "error"),
    [
        (A, Desenlace.CANJEADO, None),
        (C, Desenlace.DUPLICADO, None),
        (L, Desenlace.LIBERADO, CodigoError.CODIGO_LIBERADO),
        (D, Desenlace.NO_ASIGNADO, CodigoError.CODIGO_NO_ASIGNADO),
    ],
)
def test_state_table(estado, desenlace, error):
    [paso] = plan(["X"], {"X": [Copia(1, estado)]})
    assert paso == Paso("X", 1, desenlace)
    assert paso.error is error


def test_unknown_text_is_not_found():
    [paso] = plan(["NADA"], {"X": [Copia(1, A)]})
    assert paso == Paso("NADA", None, Desenlace.NO_ENCONTRADO)
    assert paso.error is CodigoError.CODIGO_NO_ENCONTRADO


@pytest.mark.parametrize(
    ("copias", "elegida"),
    [
        ([Copia(1, C), Copia(2, A)], 2),  # a redeemable copy first, even a newer one
        ([Copia(3, A), Copia(2, A)], 2),  # then the oldest
        ([Copia(1, D), Copia(2, L), Copia(3, C)], 3),  # canjeado before liberado
        ([Copia(1, D), Copia(2, L)], 2),  # liberado before disponible
        ([Copia(5, D), Copia(4, D)], 4),
        ([], None),
    ],
)
def test_choice_among_copies(copias, elegida):
    chosen = choose(copias)
    assert (chosen.id if chosen else None) == elegida


def test_a_batch_is_successive_single_redemptions():
    copias = {"X": [Copia(1, A), Copia(2, A)], "Y": [Copia(3, A)], "Z": [Copia(4, L)]}
    pasos = plan(["X", "Y", "X", "X", "Y", "Z", "Z", "", "W"], copias)
    assert [(p.codigo, p.copia, p.desenlace) for p in pasos] == [
        ("X", 1, Desenlace.CANJEADO),
        ("Y", 3, Desenlace.CANJEADO),
        ("X", 2, Desenlace.CANJEADO),  # the next asignado copy
        ("X", 1, Desenlace.DUPLICADO),  # all redeemed: the oldest
        ("Y", 3, Desenlace.DUPLICADO),
        ("Z", 4, Desenlace.LIBERADO),
        ("Z", 4, Desenlace.LIBERADO),
        ("", None, Desenlace.NO_ENCONTRADO),
        ("W", None, Desenlace.NO_ENCONTRADO),
    ]
    assert summarize(pasos) == Resumen(recibidos=9, canjeados=3, duplicados=2, rechazados=4)
    # The input mapping is not changed.
    assert copias["X"] == [Copia(1, A), Copia(2, A)]


def test_summary_of_nothing():
    assert summarize([]) == Resumen(0, 0, 0, 0)


def test_batch_limit():
    check_batch_size(MAX_CODIGOS)
    with pytest.raises(LoyaltyError) as err:
        check_batch_size(MAX_CODIGOS + 1)
    assert err.value.codigo is CodigoError.DEMASIADOS_CODIGOS
    assert err.value.detalle == "codigos: más de 500 códigos en una llamada; envíelos en varias"


@pytest.mark.parametrize(
    ("raw", "codigo"),
    [
        ("hd-0001", "HD-0001"),
        ("  Hd-0001\t\n", "HD-0001"),
        ("", ""),
        ("  ", ""),
        ("hd 1", "HD 1"),
    ],
)
def test_code_text(raw, codigo):
    assert code_text(raw) == codigo


@pytest.mark.parametrize(
    ("codigo", "possible"),
    [
        ("HD-0001", True),
        ("X" * 64, True),
        ("HD 1", True),
        ("", False),
        ("X" * 65, False),
        ("HD\x00", False),
        ("HD\x85", False),
    ],
)
def test_could_exist(codigo, possible):
    assert could_exist(codigo) is possible


@pytest.mark.parametrize(
    ("desenlace", "codigo", "words"),
    [
        (Desenlace.LIBERADO, CodigoError.CODIGO_LIBERADO, "liberado"),
        (Desenlace.NO_ASIGNADO, CodigoError.CODIGO_NO_ASIGNADO, "entregado"),
        (Desenlace.NO_ENCONTRADO, CodigoError.CODIGO_NO_ENCONTRADO, "no tiene"),
    ],
)
def test_single_form_errors(desenlace, codigo, words):
    error = Paso("HD-9", None, desenlace).falla()
    assert error is not None
    assert error.codigo is codigo
    assert '"HD-9"' in error.detalle
    assert words in error.detalle


def test_no_error_on_success_and_long_codes_are_cut():
    assert Paso("HD-9", 1, Desenlace.CANJEADO).falla() is None
    assert Paso("HD-9", 1, Desenlace.DUPLICADO).falla() is None
    error = Paso("Ñ" * 70, None, Desenlace.NO_ENCONTRADO).falla()
    assert error is not None
    assert 'codigo "' + "\\u00d1" * 5 + '"…: ' in error.detalle  # cut, ASCII-escaped
