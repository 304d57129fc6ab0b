"""`loyalty admin …` against a real gRPC server (BackofficeServicer) on PostgreSQL:
readable output, --json, one-line errors with the catalogue's codigo, exit codes."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from sqlalchemy import Engine, insert, select

from loyalty_grpc.runtime.admin_token import ensure_admin_token
from loyalty_grpc.store.tables import codigos
from tests.support import ADMIN_TOKEN, free_port
from tests.support import cli_failed as failed
from tests.support import cli_ok as ok


def test_program_key_fan_promo_code_flow(admin_cli, engine: Engine):
    out = ok(admin_cli("programs", "upsert", "cli", "--nombre", "Club CLI", "--tasa", "0.1"))
    assert "creado: sí" in out
    assert "id=cli" in out
    assert "tasa_puntos=0.1" in out
    assert "creado: no" in ok(
        admin_cli("programs", "upsert", "cli", "--nombre", "Club CLI", "--tasa", "0.100")
    )
    assert 'nombre="Club CLI"' in ok(admin_cli("programs", "list"))

    issued = json.loads(
        ok(
            admin_cli(
                "keys",
                "issue",
                "-p",
                "cli",
                "--integracion",
                "Caja",
                "--permisos",
                "fan:leer,tx:escribir",
                "roster:leer",
                "--json",
            )
        )
    )
    assert issued["clave"].startswith("lp_vivo_")
    assert issued["key"]["permisos"] == ["fan:leer", "tx:escribir", "roster:leer"]
    # --json prints the proto's JSON: enum value names, RFC 3339 Timestamps, unset left out.
    assert issued["key"]["modo"] == "KEY_MODE_VIVO"
    assert issued["key"]["creada"].endswith("Z")
    assert "revocada" not in issued["key"]
    listed = ok(admin_cli("keys", "list", "-p", "cli"))
    assert issued["clave"] not in listed
    assert f"sufijo={issued['clave'][-4:]}" in listed
    # The readable output: the Spanish words, ISO 8601 UTC with milliseconds.
    assert "modo=vivo" in listed
    assert re.search(r"creada=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z(\s|$)", listed)
    assert "revocada=" not in listed
    revoked = ok(admin_cli("--json", "keys", "revoke", str(issued["key"]["id"])))
    assert json.loads(revoked)["key"]["revocada"].endswith("Z")
    listed = ok(admin_cli("keys", "list", "-p", "cli"))
    assert re.search(r"revocada=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z(\s|$)", listed)

    out = ok(
        admin_cli(
            "fans",
            "register",
            "-p",
            "cli",
            "cli 1",
            "--nombre",
            "Ana Pérez",
            "--correo",
            "ana@example.com",
            "--socio-desde",
            "2018",
        )
    )
    assert "id=CLI1" in out
    assert 'nombre="Ana Pérez"' in out
    assert "estado=activo" in out
    out = ok(admin_cli("fans", "update", "-p", "cli", "CLI1", "--temporadas", "3"))
    assert "temporadas=3" in out
    assert "correo=ana@example.com" in out
    assert "estado=baja" in ok(admin_cli("fans", "baja", "-p", "cli", "CLI1", "--motivo", "pide"))
    assert "estado=activo" in ok(admin_cli("fans", "reactivate", "-p", "cli", "CLI1"))
    fan = json.loads(ok(admin_cli("fans", "get", "-p", "cli", "cli1", "--json")))["fan"]
    assert (fan["id"], fan["temporadas"], fan["estado"]) == ("CLI1", 3, "FAN_STATE_ACTIVO")
    assert "baja_en" not in fan
    assert fan["actualizado"].endswith("Z")
    assert "puntos=0" in ok(admin_cli("fans", "get", "-p", "cli", "CLI1"))

    promo = json.loads(
        ok(
            admin_cli(
                "--json",
                "promos",
                "create",
                "-p",
                "cli",
                "2x1",
                "--vigencia-fin",
                "2099-12-31",
                "--puntos-canje",
                "5",
            )
        )
    )
    promo_id = promo["promo"]["id"]
    assert promo["promo"]["estado"] == "PROMO_STATE_ACTIVA"
    assert "estado=pausada" in ok(
        admin_cli("promos", "update", "-p", "cli", str(promo_id), "--estado", "pausada")
    )
    with engine.begin() as conn:
        conn.execute(insert(codigos).values(promo_id=promo_id, programa_id="cli", codigo="CLI-1"))
    out = ok(
        admin_cli(
            "codes", "assign", "-p", "cli", "--promo", str(promo_id), "cli-1", "--fan", "CLI1"
        )
    )
    assert "estado=asignado" in out
    assert "fan=CLI1" in out
    assert "estado=liberado" in ok(
        admin_cli("codes", "release", "-p", "cli", "--promo", str(promo_id), "CLI-1")
    )
    with engine.connect() as conn:
        assert (
            conn.execute(select(codigos.c.estado).where(codigos.c.codigo == "CLI-1")).scalar_one()
            == "liberado"
        )
    line = failed(
        admin_cli("codes", "release", "-p", "cli", "--promo", str(promo_id), "CLI-1"),
        "transicion_invalida",
    )
    assert "liberado" in line


def test_apply_fixture(admin_cli, tmp_path: Path):
    fixture = tmp_path / "f.json"
    fixture.write_text(
        json.dumps(
            {
                "programas": [
                    {
                        "id": "clifx",
                        "nombre": "Fixture",
                        "tasa_puntos": "1",
                        "fans": [
                            {
                                "id": "FX1",
                                "nombre": "Ana",
                                "correo": "fx1@example.com",
                                "socio_desde": 2020,
                                "qr_token": "fxqr1",
                            }
                        ],
                    }
                ]
            }
        )
    )
    out = ok(admin_cli("apply", str(fixture)))
    assert "entidad=programas" in out
    again = json.loads(ok(admin_cli("apply", str(fixture), "--json")))
    assert all(c["creados"] == 0 and c["actualizados"] == 0 for c in again["counts"])
    failed(admin_cli("apply", str(tmp_path / "missing.json")), "solicitud_invalida")
    fixture.write_text("{")
    failed(admin_cli("apply", str(fixture)), "fixture_invalido")


def test_errors_are_one_line_with_the_codigo(admin_cli, monkeypatch, tmp_path):
    failed(admin_cli("fans", "get", "-p", "nadie", "X"), "programa_no_encontrado")
    ok(admin_cli("programs", "upsert", "cli2", "--nombre", "Dos", "--tasa", "1"))
    line = failed(admin_cli("fans", "get", "-p", "cli2", "nope"), "fan_no_encontrado")
    assert "NOPE" in line
    failed(
        admin_cli(
            "fans",
            "register",
            "-p",
            "cli2",
            "X1",
            "--nombre",
            "A",
            "--correo",
            "a",
            "--socio-desde",
            "2000",
        ),
        "solicitud_invalida",
    )
    failed(
        admin_cli("keys", "issue", "-p", "cli2", "--integracion", "C", "--permisos", "x:y"),
        "permiso_desconocido",
    )
    failed(admin_cli("keys", "revoke", "987654"), "clave_no_encontrada")
    failed(
        admin_cli("programs", "list", target=f"127.0.0.1:{free_port()}"), "servicio_no_disponible"
    )
    monkeypatch.setenv("LOYALTY_ADMIN_TOKEN", "wrong-token-" + secrets.token_urlsafe(24))
    failed(admin_cli("programs", "list"), "clave_invalida")


def test_token_from_the_data_dir(admin_cli, monkeypatch, tmp_path):
    monkeypatch.delenv("LOYALTY_ADMIN_TOKEN")
    line = failed(admin_cli("--data-dir", str(tmp_path), "programs", "list"), "no_autenticado")
    assert str(tmp_path / "admin_token") in line
    ensure_admin_token(tmp_path)  # a token the server does not know
    failed(admin_cli("--data-dir", str(tmp_path), "programs", "list"), "clave_invalida")
    (tmp_path / "admin_token").write_text(ADMIN_TOKEN + "\n")
    assert "id=" in ok(admin_cli("--data-dir", str(tmp_path), "programs", "list"))
