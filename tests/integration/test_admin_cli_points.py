"""`loyalty admin fans ledger | points adjust | sales void` against a real gRPC server
(BackofficeServicer) on PostgreSQL: readable output, --json, one-line errors."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import Engine, func, insert, select

from loyalty_grpc.api.server import GrpcServer
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import fans, ventas
from loyalty_grpc.store.uow import run_in_uow
from tests.support import cli_failed as failed
from tests.support import cli_ok as ok

P = "clip"


@pytest.fixture(scope="module")
def clave_id(server: GrpcServer, engine: Engine) -> int:
    from loyalty_grpc.services.backoffice import fans as fans_service
    from loyalty_grpc.services.backoffice import keys, programs

    run_in_uow(engine, programs.upsert_program, P, "Club CLI", "0.1")
    for fid in ("CLIP1", "CLIP2"):
        run_in_uow(
            engine,
            fans_service.register_fan,
            P,
            fid,
            nombre="Ana",
            correo=f"{fid.lower()}@example.com",
            socio_desde=2018,
        )
    return run_in_uow(engine, keys.issue_key, P, "Caja", "vivo", ["tx:escribir"]).info.id


def new_sale(engine: Engine, clave_id: int, fan_id: str, puntos: int, id_externo: str) -> int:
    with engine.begin() as conn:
        pk = conn.execute(
            select(fans.c.pk).where(fans.c.programa_id == P, fans.c.fan_id == fan_id)
        ).scalar_one()
        folio = int(
            conn.execute(
                insert(ventas)
                .values(
                    id=func.nextval("ventas_folio_seq"),
                    programa_id=P,
                    modo="vivo",
                    id_externo=id_externo,
                    fan_pk=pk,
                    importe_centavos=puntos * 1000,
                    moneda="MXN",
                    ts=func.now(),
                    puntos=puntos,
                    clave_id=clave_id,
                )
                .returning(ventas.c.id)
            ).scalar_one()
        )
        move_points(conn, P, pk, puntos, Motivo.VENTA, venta_id=folio)
    return folio


def test_adjust_ledger_void_flow(admin_cli, engine: Engine, clave_id: int):
    folio = new_sale(engine, clave_id, "CLIP1", 100, "T-1")

    out = ok(
        admin_cli(
            "points",
            "adjust",
            "clip1",
            "-p",
            P,
            "--puntos",
            "25",
            "--motivo",
            "regalo de cumpleaños",
        )
    )
    assert "motivo=ajuste" in out
    assert "puntos=25" in out
    assert "saldo=125" in out
    assert 'nota="regalo de cumpleaños"' in out
    entry = json.loads(
        ok(
            admin_cli(
                "points",
                "adjust",
                "CLIP1",
                "-p",
                P,
                "--puntos",
                "-50",
                "--motivo",
                "corrección",
                "--json",
            )
        )
    )["entry"]
    assert (entry["puntos"], entry["saldo"], entry["motivo"]) == ("-50", "75", "ajuste")
    assert entry["creado"].endswith("Z")
    assert "saldo=70" in ok(
        admin_cli("points", "adjust", "CLIP1", "-p", P, "--puntos=-5", "--motivo", "x")
    )

    out = ok(admin_cli("sales", "void", str(folio), "-p", P, "--motivo", "devolución"))
    assert f"folio={folio}" in out
    assert "fan=CLIP1" in out
    assert re.search(r"  anulada=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z(\s|$)", out)
    assert "modo=vivo" in out
    assert "revertidos: 100" in out
    assert "ya_anulada: no" in out
    again = json.loads(
        ok(admin_cli("--json", "sales", "void", str(folio), "-p", P, "--motivo", "otra vez"))
    )
    assert (again["revertidos"], again["ya_anulada"]) == ("0", True)
    assert again["sale"]["id_externo"] == "T-1"
    assert again["sale"]["modo"] == "KEY_MODE_VIVO"
    assert again["sale"]["anulada"].endswith("Z")

    lines = ok(admin_cli("fans", "ledger", "CLIP1", "-p", P)).splitlines()
    assert "id=CLIP1" in lines[0]
    assert "puntos=-30" in lines[0]
    assert lines[1].split() == [
        "fecha",
        "(UTC)",
        "motivo",
        "puntos",
        "venta",
        "código",
        "saldo",
        "nota",
    ]
    rows = [line.split() for line in lines[2:]]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", " ".join(rows[0][:2]))
    # fecha is two words (date and time), then motivo, puntos, [venta], saldo, nota…
    assert [r[2:] for r in rows] == [
        ["venta", "+100", str(folio), "100"],
        ["ajuste", "+25", "125", "regalo", "de", "cumpleaños"],
        ["ajuste", "-50", "75", "corrección"],
        ["ajuste", "-5", "70", "x"],
        ["anulacion", "-100", str(folio), "-30", "devolución"],
    ]
    ledger = json.loads(ok(admin_cli("fans", "ledger", "CLIP1", "-p", P, "--json")))
    assert [e["saldo"] for e in ledger["entries"]] == ["100", "125", "75", "70", "-30"]
    assert ledger["entries"][0]["venta"] == folio


def test_ledger_of_a_fan_without_entries(admin_cli, clave_id):
    out = ok(admin_cli("fans", "ledger", "CLIP2", "-p", P))
    assert out.splitlines()[1:] == ["(sin movimientos)"]


def test_errors_are_one_line(admin_cli, engine, clave_id):
    line = failed(
        admin_cli("points", "adjust", "CLIP2", "-p", P, "--puntos", "-1", "--motivo", "x"),
        "solicitud_invalida",
    )
    assert "saldo es 0" in line
    failed(
        admin_cli("points", "adjust", "CLIP2", "-p", P, "--puntos", "0", "--motivo", "x"),
        "solicitud_invalida",
    )
    failed(
        admin_cli("points", "adjust", "CLIP2", "-p", P, "--puntos", "5", "--motivo", " "),
        "campo_requerido",
    )
    failed(
        admin_cli("points", "adjust", "NADIE", "-p", P, "--puntos", "5", "--motivo", "x"),
        "fan_no_encontrado",
    )
    failed(admin_cli("fans", "ledger", "CLIP2", "-p", "nadie"), "programa_no_encontrado")
    line = failed(
        admin_cli("sales", "void", "987654", "-p", P, "--motivo", "x"), "venta_no_encontrada"
    )
    assert "987654" in line
    failed(admin_cli("sales", "void", "0", "-p", P, "--motivo", "x"), "solicitud_invalida")
    with engine.connect() as conn:
        assert conn.execute(select(fans.c.puntos).where(fans.c.fan_id == "CLIP2")).scalar_one() == 0


def test_out_of_range_numbers_are_usage_errors(admin_cli, capsys):
    with pytest.raises(SystemExit) as exc:
        admin_cli("sales", "void", str(2**31), "-p", P, "--motivo", "x")
    assert exc.value.code == 2
    assert "fuera de rango" in capsys.readouterr().err
