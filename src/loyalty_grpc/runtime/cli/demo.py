"""The demo program of `up --demo`: the fixture shipped with the package
(`demo_fixture.json`), applied on every start (idempotent), and what the banner shows of it
so that the curl tours (README.md, docs/tour.md) can be followed: its keys, its fans (Fan
ID, name, e-mail, QR) and a few coupon codes in each state. Everything shown is read from
the fixture."""

from __future__ import annotations

from importlib import resources

from loyalty_grpc.domain.fixture import CodigoFixture, Fixture, ProgramaFixture, parse_fixture
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan
from loyalty_grpc.store.db import make_engine

# How many codes of each state the banner names (the rest are counted).
CODES_PER_STATE = 3


def demo_document() -> str:
    return (resources.files("loyalty_grpc.runtime.cli") / "demo_fixture.json").read_text(
        encoding="utf-8"
    )


def load_demo(database_url: str) -> Fixture:
    """Apply the demo fixture (the same rows every time) and return it, parsed."""
    from loyalty_grpc.services.backoffice.fixtures import apply_fixture
    from loyalty_grpc.store.uow import run_in_uow

    text = demo_document()
    engine = make_engine(database_url, pool_size=1)
    try:
        run_in_uow(engine, apply_fixture, text)
    finally:
        engine.dispose()
    return parse_fixture(text)


def demo_lines(fixture: Fixture) -> list[str]:
    """The banner's lines about the demo: per program, its keys, its fans, then up to
    CODES_PER_STATE codes in each state that has any."""
    lines: list[str] = []
    for programa in fixture.programas:
        lines += _keys(programa)
        lines += _fans(programa)
        lines += _codes(programa)
    return lines


def _keys(programa: ProgramaFixture) -> list[str]:
    lines = []
    for clave in programa.claves:
        permisos = ", ".join(p.value for p in Permiso if p in clave.permisos) or "(none)"
        lines.append(
            f"demo key [{programa.id}] {clave.integracion}: {clave.clave}  permisos: {permisos}"
        )
    return lines


def _fans(programa: ProgramaFixture) -> list[str]:
    lines = []
    for fan in programa.fans:
        qr = (
            f"QR {programa.qr_url.rstrip('/')}/v/{fan.qr_token}"
            if programa.qr_url
            else f"QR token {fan.qr_token}"
        )
        line = (
            f"demo fan [{programa.id}] {fan.fan_id} {fan.nombre}  {fan.correo}  {qr}  "
            f"{fan.puntos} puntos"
        )
        if fan.estado is EstadoFan.BAJA:
            line += f"  baja: {fan.baja_motivo}"
        lines.append(line)
    return lines


def _codes(programa: ProgramaFixture) -> list[str]:
    by_state: dict[EstadoCodigo, list[str]] = {estado: [] for estado in EstadoCodigo}
    for promo in programa.promos:
        for codigo in promo.codigos:
            by_state[codigo.estado].append(_code(codigo, promo.nombre))
    lines = []
    for estado, codes in by_state.items():
        if not codes:
            continue
        shown = ", ".join(codes[:CODES_PER_STATE])
        more = len(codes) - CODES_PER_STATE
        if more > 0:
            shown += f" and {more} more"
        lines.append(f"demo codes [{programa.id}] {estado.value}: {shown}")
    return lines


def _code(codigo: CodigoFixture, promo: str) -> str:
    fan = f", fan {codigo.fan}" if codigo.fan else ""
    return f"{codigo.codigo} ({promo}{fan})"
