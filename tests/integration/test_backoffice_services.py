"""Back-office use cases on a real PostgreSQL, called directly: every happy path, and
every failure leaves the database exactly as it was."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select, text

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.permissions import Permiso
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo
from loyalty_grpc.services.backoffice import codes, fans, keys, programs, promos
from loyalty_grpc.store.tables import LEDGER_MISMATCH_SQL, claves, codigos
from loyalty_grpc.store.tables import fans as fans_table
from loyalty_grpc.store.tables import promos as promos_table
from loyalty_grpc.store.uow import UnitOfWork, run_in_uow
from tests.support import fails, wait_for_lock_waiters

P = "halcones"
OTRO = "otro"


@pytest.fixture(scope="module", autouse=True)
def _programs(engine: Engine) -> None:
    run_in_uow(
        engine,
        programs.upsert_program,
        P,
        "Club Halcones",
        "0.1",
        qr_url="https://halcones.example/fan",
    )
    run_in_uow(engine, programs.upsert_program, OTRO, "Otro Club", "1")


_seq = iter(range(1, 10_000))


def fan_id() -> str:
    return f"T{next(_seq):04d}"


def new_fan(engine: Engine, programa: str = P, **kw: Any) -> fans.FanInfo:
    fid = kw.pop("fan_id", None) or fan_id()
    values: dict[str, Any] = {
        "nombre": "Ana",
        "correo": f"{fid.lower()}@example.com",
        "socio_desde": 2018,
    }
    values.update(kw)
    return run_in_uow(engine, fans.register_fan, programa, fid, **values)


# ================================================================ programs


def test_upsert_program_creates_then_updates(engine):
    created = run_in_uow(engine, programs.upsert_program, "nuevo", " Club Nuevo ", "0.25")
    assert created.creado
    assert created.programa == programs.Programa("nuevo", "Club Nuevo", Decimal("0.25"), "", "MXN")
    again = run_in_uow(
        engine,
        programs.upsert_program,
        "nuevo",
        "Club Nuevo 2",
        "0.5",
        qr_url="https://n.example/v",
        moneda="mxn",
    )
    assert not again.creado
    assert again.programa == programs.Programa(
        "nuevo", "Club Nuevo 2", Decimal("0.5"), "https://n.example/v", "MXN"
    )
    listed = run_in_uow(engine, programs.list_programs)
    assert [p.id for p in listed] == sorted(p.id for p in listed)
    assert again.programa in listed


@pytest.mark.parametrize(
    ("args", "codigo", "campo"),
    [
        (("Mal Id", "X", "0.1"), CodigoError.SOLICITUD_INVALIDA, "id"),
        (("", "X", "0.1"), CodigoError.CAMPO_REQUERIDO, "id"),
        ((P, "", "0.1"), CodigoError.CAMPO_REQUERIDO, "nombre"),
        ((P, "X", "-1"), CodigoError.SOLICITUD_INVALIDA, "tasa_puntos"),
        ((P, "X", "0.1234567"), CodigoError.SOLICITUD_INVALIDA, "tasa_puntos"),
        ((P, "X", "diez"), CodigoError.SOLICITUD_INVALIDA, "tasa_puntos"),
    ],
)
def test_upsert_program_invalid(engine, args, codigo, campo):
    with fails(engine, codigo, campo):
        run_in_uow(engine, programs.upsert_program, *args)


# ================================================================ keys


def test_issue_authenticate_revoke(engine):
    issued = run_in_uow(
        engine,
        keys.issue_key,
        P,
        " Caja Norte ",
        "vivo",
        ["tx:escribir", "fan:leer", "tx:escribir"],
    )
    clave = issued.clave
    assert clave.startswith("lp_vivo_")
    assert clave not in repr(issued)
    info = issued.info
    assert (info.programa, info.integracion, info.modo) == (P, "Caja Norte", Modo.VIVO)
    assert info.permisos == ("fan:leer", "tx:escribir")
    assert info.sufijo == clave[-4:]
    assert info.revocada is None

    with engine.connect() as conn:
        stored = conn.execute(select(claves).where(claves.c.id == info.id)).one()
    caller = keys.authenticate(engine, clave)
    assert stored.hash == hashlib.sha256(clave.encode()).digest()
    assert clave.encode() not in stored.hash
    assert all(clave not in str(v) for v in stored)  # the secret is stored nowhere
    assert caller is not None
    assert (
        caller.programa_id,
        caller.programa_nombre,
        caller.clave_id,
        caller.integracion,
        caller.modo,
    ) == (P, "Club Halcones", info.id, "Caja Norte", Modo.VIVO)
    assert caller.permisos == frozenset({Permiso.TX_ESCRIBIR, Permiso.FAN_LEER})

    revoked = run_in_uow(engine, keys.revoke_key, info.id)
    assert revoked.revocada is not None
    assert keys.authenticate(engine, clave) is None
    again = run_in_uow(engine, keys.revoke_key, info.id)
    assert again.revocada == revoked.revocada  # the first revocation time stays


def test_test_key_and_listing(engine):
    prueba = run_in_uow(engine, keys.issue_key, OTRO, "Pruebas", "prueba", [])
    assert prueba.clave.startswith("lp_prueba_")
    assert prueba.info.modo is Modo.PRUEBA
    assert prueba.info.permisos == ()
    caller = keys.authenticate(engine, prueba.clave)
    assert caller is not None
    assert caller.modo is Modo.PRUEBA
    assert caller.permisos == frozenset()
    second = run_in_uow(engine, keys.issue_key, OTRO, "Caja 2", "vivo", ["roster:leer"])
    listed = run_in_uow(engine, keys.list_keys, OTRO)
    assert listed == [prueba.info, second.info]
    assert not hasattr(listed[0], "clave")


def test_authenticate_unknown_or_malformed(engine):
    assert keys.authenticate(engine, "lp_vivo_" + "x" * 32) is None
    assert keys.authenticate(engine, "nope") is None
    assert keys.authenticate(engine, "") is None


@pytest.mark.parametrize(
    ("args", "codigo", "campo"),
    [
        (("nadie", "Caja", "vivo", []), CodigoError.PROGRAMA_NO_ENCONTRADO, "programa"),
        (
            (P, "Caja", "vivo", ["fan:leer", "fan:escribir"]),
            CodigoError.PERMISO_DESCONOCIDO,
            "fan:escribir",
        ),
        ((P, "Caja", "real", []), CodigoError.SOLICITUD_INVALIDA, "modo"),
        ((P, "Caja", "", []), CodigoError.CAMPO_REQUERIDO, "modo"),
        ((P, " ", "vivo", []), CodigoError.CAMPO_REQUERIDO, "integracion"),
    ],
)
def test_issue_key_invalid(engine, args, codigo, campo):
    with fails(engine, codigo, campo):
        run_in_uow(engine, keys.issue_key, *args)


def test_key_not_found(engine):
    with fails(engine, CodigoError.CLAVE_NO_ENCONTRADA, "999999"):
        run_in_uow(engine, keys.revoke_key, 999999)
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, keys.list_keys, "nadie")


# ================================================================ fans


def test_register_and_get(engine):
    fan = run_in_uow(
        engine,
        fans.register_fan,
        P,
        " hal 9001 ",
        nombre=" Ana ",
        correo=" Ana@Example.com ",
        socio_desde=2018,
        temporadas=5,
    )
    assert (fan.programa, fan.fan_id, fan.nombre, fan.correo) == (
        P,
        "HAL9001",
        "Ana",
        "Ana@Example.com",
    )
    assert (fan.socio_desde, fan.temporadas, fan.puntos, fan.estado) == (
        2018,
        5,
        0,
        EstadoFan.ACTIVO,
    )
    assert fan.baja_en is None
    assert fan.baja_motivo is None
    assert len(fan.qr_token) == 16  # generated, URL-safe
    assert fan.qr_token.replace("-", "").replace("_", "").isalnum()
    assert run_in_uow(engine, fans.get_fan, P, "hal9001") == fan
    other = new_fan(engine)
    assert other.qr_token != fan.qr_token


def test_register_with_qr_token(engine):
    fan = new_fan(engine, qr_token=" q7Hk2Pz ")
    assert fan.qr_token == "q7Hk2Pz"


def test_register_duplicates(engine):
    first = new_fan(engine, fan_id="DUP01", correo="Dup@Example.com", qr_token="dupqr")
    with fails(engine, CodigoError.FAN_DUPLICADO, "DUP01"):
        new_fan(engine, fan_id=" dup 01", correo="otro@example.com", qr_token="x1")
    with fails(engine, CodigoError.CORREO_DUPLICADO, "correo"):
        new_fan(engine, correo=" dup@EXAMPLE.com ")
    with fails(engine, CodigoError.QR_DUPLICADO, "qr_token"):
        new_fan(engine, qr_token="dupqr")
    # qr tokens are case-sensitive; other programs are separate.
    new_fan(engine, qr_token="DUPQR")
    again = new_fan(
        engine, programa=OTRO, fan_id="DUP01", correo="dup@example.com", qr_token="dupqr"
    )
    assert again.fan_id == first.fan_id


@pytest.mark.parametrize(
    ("kw", "codigo", "campo"),
    [
        ({"fan_id": "ana@x"}, CodigoError.SOLICITUD_INVALIDA, "id"),
        ({"correo": "ana"}, CodigoError.SOLICITUD_INVALIDA, "correo"),
        ({"nombre": " "}, CodigoError.CAMPO_REQUERIDO, "nombre"),
        ({"socio_desde": 0}, CodigoError.SOLICITUD_INVALIDA, "socio_desde"),
        ({"temporadas": -1}, CodigoError.SOLICITUD_INVALIDA, "temporadas"),
        ({"qr_token": "a b"}, CodigoError.SOLICITUD_INVALIDA, "qr_token"),
    ],
)
def test_register_invalid(engine, kw, codigo, campo):
    with fails(engine, codigo, campo):
        new_fan(engine, **kw)


def test_register_in_unknown_program(engine):
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO, "nadie"):
        new_fan(engine, programa="nadie")


def test_update_only_given_fields(engine):
    fan = new_fan(engine, temporadas=1)
    same = run_in_uow(engine, fans.update_fan, P, fan.fan_id)
    assert same == fan
    changed = run_in_uow(
        engine, fans.update_fan, P, fan.fan_id.lower(), nombre="Ana María", temporadas=2
    )
    assert changed.nombre == "Ana María"
    assert changed.temporadas == 2
    assert (changed.correo, changed.socio_desde, changed.qr_token) == (
        fan.correo,
        fan.socio_desde,
        fan.qr_token,
    )
    assert changed.actualizado > fan.actualizado  # nombre is a roster field
    # Its own e-mail in another case is not a duplicate.
    recased = run_in_uow(
        engine,
        fans.update_fan,
        P,
        fan.fan_id,
        correo=fan.correo.upper(),
        qr_token="nuevo-qr-" + fan.fan_id,
        socio_desde=2000,
    )
    assert recased.correo == fan.correo.upper()
    assert recased.qr_token == "nuevo-qr-" + fan.fan_id
    assert recased.socio_desde == 2000


def test_update_duplicates_and_errors(engine):
    a = new_fan(engine)
    b = new_fan(engine)
    with fails(engine, CodigoError.CORREO_DUPLICADO):
        run_in_uow(engine, fans.update_fan, P, b.fan_id, nombre="B", correo=a.correo.title())
    with fails(engine, CodigoError.QR_DUPLICADO):
        run_in_uow(engine, fans.update_fan, P, b.fan_id, qr_token=a.qr_token)
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO, "NOEXISTE"):
        run_in_uow(engine, fans.update_fan, P, "noexiste", nombre="X")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "correo"):
        run_in_uow(engine, fans.update_fan, P, b.fan_id, nombre="X", correo="x@")
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, fans.update_fan, "nadie", b.fan_id, nombre="X")


def test_get_not_found(engine):
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO):
        run_in_uow(engine, fans.get_fan, P, "NOEXISTE")
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, fans.get_fan, "nadie", "X")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "id"):
        run_in_uow(engine, fans.get_fan, P, "  ")


def test_baja_and_reactivation(engine):
    fan = new_fan(engine)
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "motivo"):
        run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, " ")
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "activo"):
        run_in_uow(engine, fans.reactivate_fan, P, fan.fan_id)
    baja = run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, " solicitud del socio ")
    assert baja.estado is EstadoFan.BAJA
    assert baja.baja_en is not None
    assert baja.baja_motivo == "solicitud del socio"
    assert baja.actualizado > fan.actualizado
    assert run_in_uow(engine, fans.get_fan, P, fan.fan_id) == baja  # the back office still sees it
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "baja"):
        run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, "otra vez")
    back = run_in_uow(engine, fans.reactivate_fan, P, fan.fan_id)
    assert back.estado is EstadoFan.ACTIVO
    assert back.baja_en is None
    assert back.baja_motivo is None
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO):
        run_in_uow(engine, fans.deactivate_fan, P, "NOEXISTE", "x")


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_registration_same_email(engine, round_):
    """Two threads register two fans with the same e-mail at once: one wins."""
    correo = f"carrera{round_}@example.com"
    barrier = threading.Barrier(2)

    def register(fid: str) -> str:
        barrier.wait()
        try:
            new_fan(engine, fan_id=fid, correo=correo)
        except LoyaltyError as err:
            return err.codigo.value
        return "ok"

    with ThreadPoolExecutor(2) as pool:
        results = sorted(pool.map(register, [fan_id(), fan_id()]))
    assert results == ["correo_duplicado", "ok"]


@pytest.mark.parametrize(
    ("field", "codigo"),
    [
        ("fan_id", CodigoError.FAN_DUPLICADO),
        ("correo", CodigoError.CORREO_DUPLICADO),
        ("qr_token", CodigoError.QR_DUPLICADO),
    ],
)
def test_race_past_the_pre_check_is_translated(engine, field, codigo):
    """The other writer's row is not yet committed when the pre-check runs: the unique
    index makes the insert wait, then refuses it; the violation is told apart by the
    index's name."""
    n = next(_seq)
    theirs = {"fan_id": f"R{n}", "correo": f"r{n}@example.com", "qr_token": f"rq{n}"}
    mine = {"fan_id": f"M{n}", "correo": f"m{n}@example.com", "qr_token": f"mq{n}"}
    mine[field] = theirs[field].lower() if field == "fan_id" else theirs[field]
    with engine.connect() as other:
        other.begin()
        other.execute(
            insert(fans_table).values(programa_id=P, nombre="Otro", socio_desde=2000, **theirs)
        )
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(new_fan, engine, **mine)
            wait_for_lock_waiters(engine, 1)  # on Citus: on any node
            other.commit()
            with pytest.raises(LoyaltyError) as err:
                future.result(timeout=10)
    assert err.value.codigo is codigo
    with engine.connect() as conn:
        stored = (
            conn.execute(
                select(fans_table.c.fan_id).where(fans_table.c.fan_id.in_([f"R{n}", f"M{n}"]))
            )
            .scalars()
            .all()
        )
    assert stored == [f"R{n}"]  # only theirs


# ================================================================ promotions


def test_create_and_update_promo(engine):
    promo = run_in_uow(
        engine,
        promos.create_promo,
        P,
        " 2x1 Hot Dog ",
        vigencia_fin="2099-12-31",
        descripcion="Dos por uno\nen el estadio",
        puntos_canje=50,
    )
    assert (
        promo.programa,
        promo.nombre,
        promo.estado,
        promo.vigencia_fin,
        promo.puntos_canje,
        promo.descripcion,
    ) == (
        P,
        "2x1 Hot Dog",
        EstadoPromo.ACTIVA,
        date(2099, 12, 31),
        50,
        "Dos por uno\nen el estadio",
    )
    assert run_in_uow(engine, promos.update_promo, P, promo.id) == promo
    paused = run_in_uow(engine, promos.update_promo, P, promo.id, estado="pausada", puntos_canje=10)
    assert (paused.estado, paused.puntos_canje, paused.vigencia_fin, paused.descripcion) == (
        EstadoPromo.PAUSADA,
        10,
        promo.vigencia_fin,
        promo.descripcion,
    )
    moved = run_in_uow(
        engine,
        promos.update_promo,
        P,
        promo.id,
        estado="activa",
        vigencia_fin="2030-01-31",
        descripcion="",
    )
    assert (moved.estado, moved.vigencia_fin, moved.descripcion) == (
        EstadoPromo.ACTIVA,
        date(2030, 1, 31),
        "",
    )
    ended = run_in_uow(engine, promos.update_promo, P, promo.id, estado="terminada")
    assert ended.estado is EstadoPromo.TERMINADA
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "terminada"):
        run_in_uow(engine, promos.update_promo, P, promo.id, estado="activa", puntos_canje=1)
    # Other fields of an ended promotion may still change.
    assert run_in_uow(engine, promos.update_promo, P, promo.id, puntos_canje=0).puntos_canje == 0


def test_create_promo_with_estado(engine):
    promo = run_in_uow(
        engine,
        promos.create_promo,
        P,
        "Pausada desde el inicio",
        vigencia_fin="2099-01-01",
        estado="pausada",
    )
    assert promo.estado is EstadoPromo.PAUSADA


def test_promo_errors(engine):
    promo = run_in_uow(engine, promos.create_promo, P, "Única", vigencia_fin="2099-12-31")
    with fails(engine, CodigoError.PROMO_DUPLICADA, "\\u00daNICA"):
        run_in_uow(engine, promos.create_promo, P, " ÚNICA ", vigencia_fin="2099-12-31")
    run_in_uow(engine, promos.create_promo, OTRO, "Única", vigencia_fin="2099-12-31")
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, promos.create_promo, "nadie", "X", vigencia_fin="2099-12-31")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "vigencia_fin"):
        run_in_uow(engine, promos.create_promo, P, "X", vigencia_fin="31/12/2099")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "vigencia_fin"):
        run_in_uow(engine, promos.create_promo, P, "X", vigencia_fin="")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "puntos_canje"):
        run_in_uow(engine, promos.create_promo, P, "X", vigencia_fin="2099-12-31", puntos_canje=-1)
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "estado"):
        run_in_uow(engine, promos.create_promo, P, "X", vigencia_fin="2099-12-31", estado="vigente")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "nombre"):
        run_in_uow(engine, promos.create_promo, P, "", vigencia_fin="2099-12-31")
    with fails(engine, CodigoError.PROMO_NO_ENCONTRADA, "999999"):
        run_in_uow(engine, promos.update_promo, P, 999999, estado="pausada")
    with fails(engine, CodigoError.PROMO_NO_ENCONTRADA):
        run_in_uow(engine, promos.update_promo, OTRO, promo.id, estado="pausada")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "estado"):
        run_in_uow(engine, promos.update_promo, P, promo.id, estado="x")
    with fails(engine, CodigoError.SOLICITUD_INVALIDA, "vigencia_fin"):
        run_in_uow(
            engine, promos.update_promo, P, promo.id, estado="pausada", vigencia_fin="2099-02-30"
        )


# ================================================================ codes


@pytest.fixture(scope="module")
def promo(engine: Engine) -> promos.PromoInfo:
    return run_in_uow(
        engine, promos.create_promo, P, "Códigos", vigencia_fin="2099-12-31", puntos_canje=5
    )


def add_code(
    engine: Engine,
    promo: promos.PromoInfo,
    estado: str = "disponible",
    fan: fans.FanInfo | None = None,
) -> str:
    codigo = f"CD-{next(_seq):05d}"
    with engine.begin() as conn:
        fan_pk = (
            None
            if fan is None
            else conn.execute(
                select(fans_table.c.pk).where(
                    fans_table.c.programa_id == fan.programa, fans_table.c.fan_id == fan.fan_id
                )
            ).scalar_one()
        )
        conn.execute(
            insert(codigos).values(
                promo_id=promo.id, programa_id=P, codigo=codigo, estado=estado, fan_pk=fan_pk
            )
        )
    return codigo


def code_row(engine: Engine, promo: promos.PromoInfo, codigo: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            select(codigos).where(codigos.c.promo_id == promo.id, codigos.c.codigo == codigo)
        ).one()


def test_assign_then_release(engine, promo):
    fan = new_fan(engine)
    codigo = add_code(engine, promo)
    assigned = run_in_uow(
        engine, codes.assign_code, P, promo.id, f"  {codigo.lower()} ", fan.fan_id.lower()
    )
    assert assigned == codes.CodigoInfo(promo.id, codigo, EstadoCodigo.ASIGNADO, fan.fan_id)
    row = code_row(engine, promo, codigo)
    assert row.asignado_en is not None
    assert row.liberado_en is None
    with fails(engine, CodigoError.TRANSICION_INVALIDA, codigo, "asignado"):
        run_in_uow(engine, codes.assign_code, P, promo.id, codigo, fan.fan_id)
    released = run_in_uow(engine, codes.release_code, P, promo.id, codigo)
    # A delivered code keeps its fan once liberado.
    assert released == codes.CodigoInfo(promo.id, codigo, EstadoCodigo.LIBERADO, fan.fan_id)
    assert code_row(engine, promo, codigo).liberado_en is not None
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "liberado"):
        run_in_uow(engine, codes.release_code, P, promo.id, codigo)
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "liberado"):
        run_in_uow(engine, codes.assign_code, P, promo.id, codigo, fan.fan_id)


def test_release_disponible(engine, promo):
    codigo = add_code(engine, promo)
    released = run_in_uow(engine, codes.release_code, P, promo.id, codigo)
    assert released == codes.CodigoInfo(promo.id, codigo, EstadoCodigo.LIBERADO, None)


def test_canjeado_is_final_for_the_back_office(engine, promo):
    fan = new_fan(engine)
    codigo = add_code(engine, promo, "canjeado", fan)
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "canjeado"):
        run_in_uow(engine, codes.release_code, P, promo.id, codigo)
    with fails(engine, CodigoError.TRANSICION_INVALIDA, "canjeado"):
        run_in_uow(engine, codes.assign_code, P, promo.id, codigo, fan.fan_id)


def test_code_errors(engine, promo):
    fan = new_fan(engine)
    codigo = add_code(engine, promo)
    with fails(engine, CodigoError.CODIGO_NO_ENCONTRADO, "NOPE"):
        run_in_uow(engine, codes.assign_code, P, promo.id, "nope", fan.fan_id)
    with fails(engine, CodigoError.CODIGO_NO_ENCONTRADO):
        run_in_uow(engine, codes.release_code, P, promo.id, "nope")
    with fails(engine, CodigoError.PROMO_NO_ENCONTRADA):
        run_in_uow(engine, codes.assign_code, P, 999999, codigo, fan.fan_id)
    with fails(engine, CodigoError.PROMO_NO_ENCONTRADA):
        run_in_uow(engine, codes.release_code, OTRO, promo.id, codigo)
    with fails(engine, CodigoError.PROGRAMA_NO_ENCONTRADO):
        run_in_uow(engine, codes.release_code, "nadie", promo.id, codigo)
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO, "NOEXISTE"):
        run_in_uow(engine, codes.assign_code, P, promo.id, codigo, "noexiste")
    with fails(engine, CodigoError.CAMPO_REQUERIDO, "codigo"):
        run_in_uow(engine, codes.assign_code, P, promo.id, " ", fan.fan_id)
    run_in_uow(engine, fans.deactivate_fan, P, fan.fan_id, "baja")
    with fails(engine, CodigoError.FAN_NO_ENCONTRADO, "baja"):
        run_in_uow(engine, codes.assign_code, P, promo.id, codigo, fan.fan_id)
    assert code_row(engine, promo, codigo).estado == "disponible"


def test_concurrent_assign_of_one_code(engine, promo):
    """Two deliveries of the same code at once: one wins, the other sees it asignado."""
    codigo = add_code(engine, promo)
    a, b = new_fan(engine), new_fan(engine)
    barrier = threading.Barrier(2)

    def assign(fan: fans.FanInfo) -> str:
        barrier.wait()
        try:
            run_in_uow(engine, codes.assign_code, P, promo.id, codigo, fan.fan_id)
        except LoyaltyError as err:
            return err.codigo.value
        return "ok"

    with ThreadPoolExecutor(2) as pool:
        results: list[str] = sorted(pool.map(assign, [a, b]))
    assert results == ["ok", "transicion_invalida"]


# ================================================================ composing use cases


def _promo_names(engine: Engine, nombre: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(select(promos_table.c.nombre).where(promos_table.c.nombre == nombre))
            .scalars()
            .all()
        )


def test_use_cases_compose_in_one_unit_of_work(engine: Engine) -> None:
    """Two use cases on one connection are one transaction: the second sees the first's
    rows, a rollback undoes both, a commit keeps both."""
    for commit in (False, True):
        fid, nombre = fan_id(), f"Compuesta {next(_seq)}"
        with UnitOfWork(engine) as uow:
            fan = fans.register_fan(
                uow, P, fid, nombre="Ana", correo=f"{fid}@example.com", socio_desde=2020
            )
            promos.create_promo(uow, P, nombre, vigencia_fin="2099-12-31")
            assert fans.update_fan(uow, P, fid, temporadas=3).temporadas == 3
            if commit:
                uow.commit()
        if commit:
            assert run_in_uow(engine, fans.get_fan, P, fid).temporadas == 3
            assert _promo_names(engine, nombre) == [nombre]
        else:
            with pytest.raises(LoyaltyError) as err:
                run_in_uow(engine, fans.get_fan, P, fan.fan_id)
            assert err.value.codigo is CodigoError.FAN_NO_ENCONTRADO
            assert _promo_names(engine, nombre) == []


def test_a_failing_use_case_rolls_back_the_ones_before_it(engine: Engine) -> None:
    fid = fan_id()
    taken = new_fan(engine)
    duplicate = (CodigoError.CORREO_DUPLICADO, "correo: otro fan del programa ya lo usa")
    with fails(engine, *duplicate), UnitOfWork(engine) as uow:
        fans.register_fan(uow, P, fid, nombre="Ana", correo=f"{fid}@example.com", socio_desde=2020)
        fans.register_fan(uow, P, fan_id(), nombre="Eva", correo=taken.correo, socio_desde=2020)
        uow.commit()


def test_find_taken_checks_a_batch_in_one_query(engine: Engine) -> None:
    """The fixture's check and register/update's are one rule: a batch of claims costs one
    query; Fan IDs are reported before e-mails, e-mails before QR tokens, then in order."""
    a, b = new_fan(engine), new_fan(engine)
    free = [
        fans.FanClaim(f"LIBRE{i}", f"libre{i}@example.com", f"qr-libre-{i}") for i in range(500)
    ]
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    with UnitOfWork(engine) as uow:
        event.listen(uow.conn, "before_cursor_execute", count)
        assert fans.find_taken(uow, P, free) is None
        # The claimant itself holding its values is no conflict (an update, a re-apply).
        assert fans.find_taken(uow, P, [fans.FanClaim(a.fan_id, a.correo, a.qr_token)]) is None
        claims = [
            *free,
            fans.FanClaim("NUEVO", "nuevo@example.com", b.qr_token),  # b's token
            fans.FanClaim("OTRO", a.correo.upper(), None),  # a's e-mail, another case
        ]
        taken = fans.find_taken(uow, P, claims)
        assert taken == fans.Taken(
            claims[-1], "correo", "uq_fans_programa_correo", CodigoError.CORREO_DUPLICADO, a.fan_id
        )
        new = fans.FanClaim(b.fan_id, "x@example.com", a.qr_token, nuevo=True)
        taken = fans.find_taken(uow, P, [*claims, new])
        assert taken is not None
        assert (taken.campo, taken.holder) == ("id", b.fan_id)
    assert len(statements) == 4


def test_nothing_left_half_done(engine: Engine) -> None:
    """The balance cache still equals the ledger after everything above."""
    with engine.connect() as conn:
        assert conn.execute(text(LEDGER_MISMATCH_SQL)).all() == []
