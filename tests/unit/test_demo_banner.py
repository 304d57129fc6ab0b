"""What `up --demo` prints about the demo (runtime/cli/demo.py), read from the fixture file, and
how the commands the CLI suggests are named (runtime/console.py)."""

from __future__ import annotations

import json

import pytest

from loyalty_grpc.domain.fixture import parse_fixture
from loyalty_grpc.runtime.cli.demo import CODES_PER_STATE, demo_document, demo_lines
from loyalty_grpc.runtime.console import command, program

STATES = ("disponible", "asignado", "canjeado", "liberado")


def test_the_banner_shows_every_key_and_fan_and_codes_of_every_state_of_the_fixture() -> None:
    document = json.loads(demo_document())
    lines = demo_lines(parse_fixture(demo_document()))
    for programa in document["programas"]:
        tag = f"[{programa['id']}]"
        for clave in programa["claves"]:
            assert any(
                line.startswith(f"demo key {tag} {clave['integracion']}: {clave['clave']} ")
                for line in lines
            ), clave["integracion"]
        fan_lines = [line for line in lines if line.startswith(f"demo fan {tag} ")]
        assert len(fan_lines) == len(programa["fans"])
        for fan, line in zip(programa["fans"], fan_lines, strict=True):
            assert line.startswith(f"demo fan {tag} {fan['id']} {fan['nombre']}  {fan['correo']}")
            assert f"{programa['qr_url']}/v/{fan['qr_token']}" in line
            assert f"  {fan['puntos']} puntos" in line
            assert ("baja: " in line) == (fan.get("estado") == "baja")
        codes = {
            estado: [
                codigo["codigo"]
                for promo in programa["promos"]
                for codigo in promo["codigos"]
                if codigo.get("estado", "disponible") == estado
            ]
            for estado in STATES
        }
        for estado in STATES:
            assert codes[estado], f"the demo has no code in state {estado} for the tour"
            (line,) = (line for line in lines if line.startswith(f"demo codes {tag} {estado}: "))
            for codigo in codes[estado][:CODES_PER_STATE]:
                assert f" {codigo} (" in line


def test_many_codes_of_a_state_are_counted_and_a_program_without_qr_url_shows_the_token() -> None:
    fixture = {
        "programas": [
            {
                "id": "p",
                "nombre": "P",
                "tasa_puntos": "1",
                "fans": [
                    {
                        "id": "F1",
                        "nombre": "Ana",
                        "correo": "ana@example.com",
                        "socio_desde": 2020,
                        "qr_token": "tok1",
                    }
                ],
                "promos": [
                    {
                        "nombre": "Promo",
                        "vigencia_fin": "2099-01-01",
                        "codigos": [{"codigo": f"C{n}"} for n in range(CODES_PER_STATE + 2)],
                    }
                ],
            }
        ]
    }
    lines = demo_lines(parse_fixture(json.dumps(fixture)))
    assert lines == [
        "demo fan [p] F1 Ana  ana@example.com  QR token tok1  0 puntos",
        "demo codes [p] disponible: "
        + ", ".join(f"C{n} (Promo)" for n in range(CODES_PER_STATE))
        + " and 2 more",
    ]


def test_suggested_commands_name_the_program_as_it_is_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOYALTY_PROG", raising=False)
    assert (program(), command("migrate")) == ("loyalty", "loyalty migrate")
    monkeypatch.setenv("LOYALTY_PROG", "./dev")  # what ./dev sets
    assert command("admin fans get X -p demo") == "./dev admin fans get X -p demo"
