"""The pure redeem rules: the state table, the choice among copies of one text, repeats in
a batch, the batch limit, the summary and the single form's errors."""

from __future__ import annotations

import pytest

from loyalty_grpc.domain.codes import code_text
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.promos import EstadoCodigo
from loyalty_grpc.domain.redeem import (
    MAX_CODIGOS,
    Copy,
    Outcome,
    Resumen,
    Step,
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
    ("estado", "outcome", "error"),
    [
        (A, Outcome.CANJEADO, None),
        (C, Outcome.DUPLICADO, None),
        (L, Outcome.LIBERADO, CodigoError.CODIGO_LIBERADO),
        (D, Outcome.NO_ASIGNADO, CodigoError.CODIGO_NO_ASIGNADO),
    ],
)
def test_state_table(estado, outcome, error):
    [step] = plan(["X"], {"X": [Copy(1, estado)]})
    assert step == Step("X", 1, outcome)
    assert step.error is error


def test_unknown_text_is_not_found():
    [step] = plan(["NADA"], {"X": [Copy(1, A)]})
    assert step == Step("NADA", None, Outcome.NO_ENCONTRADO)
    assert step.error is CodigoError.CODIGO_NO_ENCONTRADO


@pytest.mark.parametrize(
    ("copias", "elegida"),
    [
        ([Copy(1, C), Copy(2, A)], 2),  # a redeemable copy first, even a newer one
        ([Copy(3, A), Copy(2, A)], 2),  # then the oldest
        ([Copy(1, D), Copy(2, L), Copy(3, C)], 3),  # canjeado before liberado
        ([Copy(1, D), Copy(2, L)], 2),  # liberado before disponible
        ([Copy(5, D), Copy(4, D)], 4),
        ([], None),
    ],
)
def test_choice_among_copies(copias, elegida):
    chosen = choose(copias)
    assert (chosen.id if chosen else None) == elegida


def test_a_batch_is_successive_single_redemptions():
    copias = {"X": [Copy(1, A), Copy(2, A)], "Y": [Copy(3, A)], "Z": [Copy(4, L)]}
    steps = plan(["X", "Y", "X", "X", "Y", "Z", "Z", "", "W"], copias)
    assert [(p.codigo, p.copia, p.outcome) for p in steps] == [
        ("X", 1, Outcome.CANJEADO),
        ("Y", 3, Outcome.CANJEADO),
        ("X", 2, Outcome.CANJEADO),  # the next asignado copy
        ("X", 1, Outcome.DUPLICADO),  # all redeemed: the oldest
        ("Y", 3, Outcome.DUPLICADO),
        ("Z", 4, Outcome.LIBERADO),
        ("Z", 4, Outcome.LIBERADO),
        ("", None, Outcome.NO_ENCONTRADO),
        ("W", None, Outcome.NO_ENCONTRADO),
    ]
    assert summarize(steps) == Resumen(recibidos=9, canjeados=3, duplicados=2, rechazados=4)
    # The input mapping is not changed.
    assert copias["X"] == [Copy(1, A), Copy(2, A)]


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
    ("outcome", "codigo", "words"),
    [
        (Outcome.LIBERADO, CodigoError.CODIGO_LIBERADO, "liberado"),
        (Outcome.NO_ASIGNADO, CodigoError.CODIGO_NO_ASIGNADO, "entregado"),
        (Outcome.NO_ENCONTRADO, CodigoError.CODIGO_NO_ENCONTRADO, "no tiene"),
    ],
)
def test_single_form_errors(outcome, codigo, words):
    error = Step("HD-9", None, outcome).failure()
    assert error is not None
    assert error.codigo is codigo
    assert '"HD-9"' in error.detalle
    assert words in error.detalle


def test_no_error_on_success_and_long_codes_are_cut():
    assert Step("HD-9", 1, Outcome.CANJEADO).failure() is None
    assert Step("HD-9", 1, Outcome.DUPLICADO).failure() is None
    error = Step("Ñ" * 70, None, Outcome.NO_ENCONTRADO).failure()
    assert error is not None
    assert 'codigo "' + "\\u00d1" * 5 + '"…: ' in error.detalle  # cut, ASCII-escaped
