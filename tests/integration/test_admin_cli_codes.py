"""`loyalty admin codes import | next` against a real gRPC server (BackofficeServicer) on
PostgreSQL: a 12,000-code file imported twice (the second adds nothing), an import stopped
by a bad code and resumed, stdin, progress lines, one-line errors."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from loyalty_grpc.services.backoffice import fans, programs, promos
from loyalty_grpc.store.tables import codigos
from loyalty_grpc.store.uow import run_in_uow

P = "clic"


@pytest.fixture(scope="module", autouse=True)
def club(engine: Engine) -> None:
    """The program and a fan, there before the module's server starts."""
    run_in_uow(engine, programs.upsert_program, P, "Club Códigos", "0.1")
    run_in_uow(
        engine,
        fans.register_fan,
        P,
        "CC01",
        nombre="Ana",
        correo="cc01@example.com",
        socio_desde=2020,
    )


_names = iter(range(1, 1000))


def new_promo(engine: Engine, estado: str = "") -> int:
    return run_in_uow(
        engine,
        promos.create_promo,
        P,
        f"Importada {next(_names)}",
        vigencia_fin="2099-12-31",
        estado=estado,
    ).id


def count(engine: Engine, promo_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(codigos).where(codigos.c.promo_id == promo_id)
            ).scalar_one()
        )


def summary(out: str) -> tuple[int, int, int]:
    lines = dict(line.split(": ") for line in out.splitlines())
    return int(lines["recibidos"]), int(lines["agregados"]), int(lines["duplicados"])


def write_codes(path: Path, codes: list[str]) -> None:
    """A file as people make them: a byte-order mark, CRLF lines, commas and semicolons,
    lower case, blank lines."""
    lines = []
    for i in range(0, len(codes), 3):
        lines.append(" , ".join(codes[i : i + 2]) + ";" + "".join(codes[i + 2 : i + 3]))
        if i % 999 == 0:
            lines.append("")
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode())


def test_import_twice_second_adds_nothing(admin_cli, engine, tmp_path):
    promo_id = new_promo(engine)
    unique = [f"imp-{i:05d}" for i in range(12_000)]
    path = tmp_path / "codes.txt"
    write_codes(path, unique + [c.upper() for c in unique[:1500]])  # 13,500 entries
    code, out, err = admin_cli("codes", "import", "--programa", P, str(promo_id), str(path))
    assert code == 0, err
    # 3 calls (5000 + 5000 + 3500): without a terminal one line at the end
    assert err.splitlines() == [err.strip()]
    assert err.startswith("leídos 13500  agregados 12000  duplicados 1500  (")
    assert "códigos/s)" in err
    recibidos, agregados, duplicados = summary(out)
    assert agregados == 12_000
    assert recibidos == agregados + duplicados
    assert count(engine, promo_id) == 12_000
    with engine.connect() as conn:
        stored = set(
            conn.execute(select(codigos.c.codigo).where(codigos.c.promo_id == promo_id)).scalars()
        )
    assert stored == {c.upper() for c in unique}

    code, out, err = admin_cli("codes", "import", "-p", P, str(promo_id), str(path))
    assert code == 0, err
    assert summary(out)[1] == 0
    assert summary(out)[2] == summary(out)[0]
    assert count(engine, promo_id) == 12_000


def test_a_failing_chunk_stops_the_import_and_running_again_resumes(admin_cli, engine, tmp_path):
    promo_id = new_promo(engine)
    codes = [f"R{i:05d}" for i in range(12_000)]
    broken = [*codes[:7000], "X" * 70, *codes[7000:]]
    path = tmp_path / "broken.txt"
    path.write_text("\n".join(broken), encoding="utf-8")
    code, out, err = admin_cli("codes", "import", "-p", P, str(promo_id), str(path))
    assert (code, out) == (1, "")
    *progress, error = err.splitlines()
    assert progress == ["leídos 5000  agregados 5000  duplicados 0  (" + progress[0].split("(")[1]]
    assert error.startswith("error: codigo_invalido: 1 código(s) no válido(s)")
    assert "archivo: código 7001 del texto" in error
    assert "se detuvo en el bloque 2 (códigos desde el 5001 del archivo)" in error
    assert "los 5000 códigos leídos antes ya quedaron guardados (agregados 5000" in error
    assert count(engine, promo_id) == 5000

    path.write_text("\n".join(codes), encoding="utf-8")  # fixed: run it again
    code, out, err = admin_cli("codes", "import", "-p", P, str(promo_id), str(path))
    assert code == 0, err
    assert summary(out) == (12_000, 7000, 5000)
    assert count(engine, promo_id) == 12_000


def test_server_errors_say_what_was_saved(admin_cli, engine, tmp_path):
    path = tmp_path / "few.txt"
    path.write_text("A1 A2 A3", encoding="utf-8")
    code, out, err = admin_cli("codes", "import", "-p", P, "999999", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("error: promo_no_encontrada: ")
    assert "los 0 códigos leídos antes" in err
    ended = new_promo(engine, estado="terminada")
    code, _, err = admin_cli("codes", "import", "-p", P, str(ended), str(path))
    assert err.splitlines()[-1].startswith("error: promo_no_admite_codigos: ")
    path.write_bytes(b"A1 \xff\xfe A2")
    code, _, err = admin_cli("codes", "import", "-p", P, str(new_promo(engine)), str(path))
    assert err.splitlines()[-1].startswith("error: solicitud_invalida: el archivo no es UTF-8")
    code, _, err = admin_cli("codes", "import", "-p", P, "1", str(tmp_path / "missing.txt"))
    assert (code, err.splitlines()[-1].split(":")[:2]) == (1, ["error", " solicitud_invalida"])


def test_import_from_stdin_with_progress_on_a_terminal(admin_cli, engine, monkeypatch):
    promo_id = new_promo(engine)
    monkeypatch.setattr(sys, "stdin", io.StringIO(" ".join(f"s{i}" for i in range(11_000))))
    code, out, err = admin_cli("codes", "import", "-p", P, str(promo_id), "-", tty=True)
    assert code == 0, err
    assert summary(out) == (11_000, 11_000, 0)
    updates = err.split("\r")[1:]
    assert len(updates) == 3  # one per call, rewritten in place
    assert updates[-1].startswith("leídos 11000  agregados 11000  duplicados 0")
    assert err.endswith("\n")
    assert err.count("\n") == 1


def test_empty_file_imports_nothing(admin_cli, engine, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text(" ,\n;", encoding="utf-8")
    code, out, _ = admin_cli("codes", "import", "-p", P, str(new_promo(engine)), str(path))
    assert code == 0
    assert summary(out) == (0, 0, 0)


def test_next_code(admin_cli, engine, tmp_path):
    promo_id = new_promo(engine)
    path = tmp_path / "two.txt"
    path.write_text("N-2\nN-1\n", encoding="utf-8")
    assert admin_cli("codes", "import", "-p", P, str(promo_id), str(path))[0] == 0
    code, out, err = admin_cli("codes", "next", "-p", P, "--promo", str(promo_id), "--fan", "cc01")
    assert (code, err) == (0, "")
    assert out == f"promo_id={promo_id}  codigo=N-1  estado=asignado  fan=CC01\n"
    admin_cli("codes", "next", "-p", P, "--promo", str(promo_id), "--fan", "CC01")
    code, out, err = admin_cli("codes", "next", "-p", P, "--promo", str(promo_id), "--fan", "CC01")
    assert (code, out) == (1, "")
    assert err.startswith("error: codigo_no_encontrado: ")
    assert "no tiene códigos disponibles" in err
