"""GET/POST /api/v1/roster through Envoy: snapshot paging, the changes after it (sale,
profile edit, registration, adjustment, void, baja with `en` and `motivo`, reactivation),
both parameter locations, `limite` bounds, cursor errors and program isolation. The
integrator's mirror (upsert by `id`) must always equal the database."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from loyalty_grpc.domain.errors import CodigoError
from loyalty_grpc.domain.roster_cursor import Cursor, Fase, Posicion, decode_cursor, encode_cursor
from loyalty_grpc.domain.timestamps import format_iso_utc
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.store.tables import fans
from tests.e2e.stack import Stack
from tests.e2e.support import assert_clean_headers, assert_error, auth

PROGRAM = "ros"
OTHER = "ros2"
BIG = "rosbig"
N_FANS = 23
ENTRY_KEYS = ["id", "nombre", "correo", "socio_desde", "puntos", "estado", "actualizado"]
BAJA_KEYS = ["id", "nombre", "correo", "socio_desde", "puntos", "estado", "baja", "actualizado"]
_ids = itertools.count()

Entry = dict[str, Any]


def fan(fan_id: str, puntos: int = 0, **extra: object) -> dict[str, object]:
    return {
        "id": fan_id,
        "nombre": f"Fan {fan_id}",
        "correo": f"{fan_id.lower()}@example.com",
        "socio_desde": 2015 + len(fan_id) % 7,
        "temporadas": 1,
        "qr_token": f"qr{fan_id}",
        "puntos": puntos,
        **extra,
    }


@pytest.fixture(scope="module")
def keys(stack: Stack) -> dict[str, str]:
    fans_ = [fan(f"ROS{i:03d}", puntos=i * 10) for i in range(1, N_FANS)]
    fans_.append(fan("ROSB01", estado="baja", baja_motivo="mudanza"))
    return stack.program(PROGRAM, fans=fans_)


@pytest.fixture(scope="module")
def other_keys(stack: Stack) -> dict[str, str]:
    return stack.program(OTHER, fans=[fan("OTR001"), fan("OTR002", 50)])


@pytest.fixture(scope="module")
def big_keys(stack: Stack) -> dict[str, str]:
    return stack.program(BIG, fans=[fan(f"BIG{i:05d}") for i in range(2001)])


# ---------------------------------------------------------------- helpers


def call(http: httpx.Client, key: str, *, post: bool = False, **params: object) -> httpx.Response:
    if post:
        return http.post("/api/v1/roster", headers=auth(key), json=params)
    return http.get(
        "/api/v1/roster", headers=auth(key), params={k: str(v) for k, v in params.items()}
    )


def page(http: httpx.Client, key: str, *, post: bool = False, **params: object) -> Entry:
    response = call(http, key, post=post, **params)
    assert response.status_code == 200, response.text
    assert_clean_headers(response)
    assert response.content.startswith(b'{"ok":true,"data":{"desde":')
    data: Entry = response.json()["data"]
    assert list(data) == ["desde", "fans", "hay_mas", "siguiente"]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", data["siguiente"])
    ids = [f["id"] for f in data["fans"]]
    assert len(ids) == len(set(ids)), "a fan twice in one page"
    for entry in data["fans"]:
        assert list(entry) == (BAJA_KEYS if entry["estado"] == "baja" else ENTRY_KEYS)
    return data


def follow(
    http: httpx.Client,
    key: str,
    desde: str | None,
    limite: int,
    mirror: dict[str, Entry],
    *,
    post: bool = False,
) -> tuple[str, list[Entry]]:
    """Call until hay_mas is false, upserting every entry by id; the final `siguiente`
    and the pages."""
    pages = []
    for _ in range(10_000):
        params: dict[str, object] = {"limite": limite}
        if desde is not None:
            params["desde"] = desde
        data = page(http, key, post=post, **params)
        assert data["desde"] == (desde or "")
        pages.append(data)
        mirror.update({f["id"]: f for f in data["fans"]})
        desde = data["siguiente"]
        if not data["hay_mas"]:
            return desde, pages
    raise AssertionError("the feed never ended")


def expected(stack: Stack, programa: str) -> dict[str, Entry]:
    """The database's roster of `programa`, as the contract's entries."""
    with stack.engine.connect() as conn:
        rows = conn.execute(select(fans).where(fans.c.programa_id == programa)).all()
    result = {}
    for r in rows:
        entry: Entry = {
            "id": r.fan_id,
            "nombre": r.nombre,
            "correo": r.correo,
            "socio_desde": r.socio_desde,
            "puntos": r.puntos,
            "estado": r.estado,
        }
        if r.estado == "baja":
            entry["baja"] = {"en": format_iso_utc(r.baja_en), "motivo": r.baja_motivo or ""}
        entry["actualizado"] = format_iso_utc(r.actualizado)
        result[r.fan_id] = entry
    return result


def snapshot(
    stack: Stack, http: httpx.Client, key: str, limite: int = 500
) -> tuple[str, dict[str, Entry]]:
    mirror: dict[str, Entry] = {}
    cursor, _ = follow(http, key, None, limite, mirror)
    return cursor, mirror


def admin(stack: Stack, method: str, request: object) -> Any:
    return getattr(stack.admin.stub, method)(request, metadata=stack.admin.md)


def sale(http: httpx.Client, key: str, fan_id: str, importe: int) -> int:
    response = http.post(
        "/api/v1/tx",
        headers=auth(key),
        json={
            "id_externo": f"ros-{next(_ids)}-{datetime.now(UTC).timestamp()}",
            "fan": fan_id,
            "importe": importe,
        },
    )
    assert response.status_code == 200, response.text
    return int(response.json()["data"]["tx"])


# ---------------------------------------------------------------- snapshot


def test_snapshot_pages_every_fan(stack, http, keys):
    mirror: dict[str, Entry] = {}
    cursor, pages = follow(http, keys["todo"], None, 5, mirror)
    assert [len(p["fans"]) for p in pages] == [5, 5, 5, 5, 3]
    assert [p["hay_mas"] for p in pages] == [True] * 4 + [False]
    assert pages[0]["desde"] == ""
    assert [p["desde"] for p in pages[1:]] == [p["siguiente"] for p in pages[:-1]]
    everyone = [f["id"] for p in pages for f in p["fans"]]
    assert len(everyone) == N_FANS == len(set(everyone))
    assert mirror == expected(stack, PROGRAM)
    baja = mirror["ROSB01"]
    assert baja["estado"] == "baja"
    assert baja["baja"]["motivo"] == "mudanza"
    assert baja["baja"]["en"].endswith("Z")
    assert "baja" not in mirror["ROS001"]
    assert mirror["ROS003"]["puntos"] == 30
    for entry in mirror.values():
        assert entry["actualizado"].endswith("Z")
        assert abs(datetime.now(UTC) - datetime.fromisoformat(entry["actualizado"])) < timedelta(
            hours=1
        )
    # Nothing changed since: the feed is at its end.
    quiet = page(http, keys["todo"], desde=cursor)
    assert (quiet["desde"], quiet["fans"], quiet["hay_mas"]) == (cursor, [], False)


def test_snapshot_in_one_page_and_exact_multiple(stack, http, keys):
    whole = page(http, keys["todo"], limite=N_FANS)
    assert (len(whole["fans"]), whole["hay_mas"]) == (N_FANS, False)
    assert {f["id"]: f for f in whole["fans"]} == expected(stack, PROGRAM)
    first = page(http, keys["todo"], limite=N_FANS - 1)
    assert (len(first["fans"]), first["hay_mas"]) == (N_FANS - 1, True)
    last = page(http, keys["todo"], limite=N_FANS - 1, desde=first["siguiente"])
    assert (len(last["fans"]), last["hay_mas"]) == (1, False)


def test_snapshot_sees_changes_made_while_paging(stack, http, keys):
    """A fan changed between two snapshot pages comes again in the changes: the mirror
    ends exact whatever page it was on."""
    mirror: dict[str, Entry] = {}
    first = page(http, keys["todo"], limite=4)
    mirror.update({f["id"]: f for f in first["fans"]})
    early, late = first["fans"][0]["id"], f"ROS{N_FANS - 2:03d}"
    admin(
        stack,
        "UpdateFan",
        bo.UpdateFanRequest(programa=PROGRAM, id=early, nombre="Cambió en la foto"),
    )
    admin(
        stack, "UpdateFan", bo.UpdateFanRequest(programa=PROGRAM, id=late, nombre="También cambió")
    )
    cursor, _ = follow(http, keys["todo"], first["siguiente"], 4, mirror)
    assert mirror[early]["nombre"] != "Cambió en la foto"  # the snapshot page was earlier
    _, pages = follow(http, keys["todo"], cursor, 4, mirror)
    changed = {f["id"] for p in pages for f in p["fans"]}
    assert {early, late} <= changed
    assert mirror == expected(stack, PROGRAM)


# ---------------------------------------------------------------- changes


def test_changes_after_the_snapshot(stack, http, keys):
    cursor, mirror = snapshot(stack, http, keys["todo"], limite=7)
    start, before = cursor, dict(mirror)
    folio = sale(http, keys["todo"], "ROS001", 250)  # +25 points
    sale(http, keys["todo"], "ROS002", 100)
    admin(stack, "VoidSale", bo.VoidSaleRequest(programa=PROGRAM, folio=folio, motivo="devolución"))
    admin(
        stack,
        "UpdateFan",
        bo.UpdateFanRequest(
            programa=PROGRAM, id="ROS003", nombre="Nombre Nuevo", correo="nuevo@x.mx"
        ),
    )
    admin(
        stack,
        "AdjustPoints",
        bo.AdjustPointsRequest(programa=PROGRAM, fan="ROS004", puntos=-15, motivo="corrección"),
    )
    admin(
        stack,
        "DeactivateFan",
        bo.DeactivateFanRequest(programa=PROGRAM, id="ROS005", motivo="solicitud del socio"),
    )
    admin(
        stack,
        "RegisterFan",
        bo.RegisterFanRequest(
            programa=PROGRAM,
            id="ROSNEW",
            nombre="Recién",
            correo="recien@example.com",
            socio_desde=2026,
        ),
    )
    # Not entry fields: no change in the feed.
    admin(stack, "UpdateFan", bo.UpdateFanRequest(programa=PROGRAM, id="ROS006", temporadas=9))

    cursor, pages = follow(http, keys["todo"], cursor, 3, mirror)
    delivered = [f for p in pages for f in p["fans"]]
    changed = {"ROS001", "ROS002", "ROS003", "ROS004", "ROS005", "ROSNEW"}
    assert {f["id"] for f in delivered} >= changed
    # Anything else delivered (at least once) is a fan as it already was.
    assert all(before[f["id"]] == f for f in delivered if f["id"] not in changed)
    assert mirror == expected(stack, PROGRAM)
    assert mirror["ROS001"]["puntos"] == before["ROS001"]["puntos"]  # sale then void
    assert mirror["ROS002"]["puntos"] == before["ROS002"]["puntos"] + 10
    assert (mirror["ROS003"]["nombre"], mirror["ROS003"]["correo"]) == (
        "Nombre Nuevo",
        "nuevo@x.mx",
    )
    assert mirror["ROS004"]["puntos"] == before["ROS004"]["puntos"] - 15
    assert mirror["ROSNEW"]["estado"] == "activo"
    assert mirror["ROSNEW"]["puntos"] == 0
    baja = mirror["ROS005"]
    assert baja["estado"] == "baja"
    assert baja["baja"]["motivo"] == "solicitud del socio"
    assert abs(datetime.now(UTC) - datetime.fromisoformat(baja["baja"]["en"])) < timedelta(
        minutes=5
    )
    assert baja["actualizado"] > before["ROS005"]["actualizado"]

    # Reactivation: back to activo, `baja` gone.
    admin(stack, "ReactivateFan", bo.ReactivateFanRequest(programa=PROGRAM, id="ROS005"))
    cursor, pages = follow(http, keys["todo"], cursor, 3, mirror)
    assert "ROS005" in {f["id"] for p in pages for f in p["fans"]}
    assert mirror["ROS005"]["estado"] == "activo"
    assert "baja" not in mirror["ROS005"]
    assert mirror == expected(stack, PROGRAM)

    # Idle: an empty last page, same position.
    quiet = page(http, keys["todo"], desde=cursor)
    assert (quiet["fans"], quiet["hay_mas"]) == ([], False)
    # An old cursor still works: everything after it again (at least once).
    again: dict[str, Entry] = dict(before)
    follow(http, keys["todo"], start, 2, again)
    assert again == expected(stack, PROGRAM)


def test_many_changes_page_in_order_once_per_page(stack, http, keys):
    cursor, mirror = snapshot(stack, http, keys["todo"])
    for round_ in range(3):
        for i in range(1, 11):
            admin(
                stack,
                "AdjustPoints",
                bo.AdjustPointsRequest(
                    programa=PROGRAM, fan=f"ROS{i:03d}", puntos=round_ + 1, motivo="lote"
                ),
            )
    _, pages = follow(http, keys["todo"], cursor, 4, mirror)
    assert all(p["hay_mas"] for p in pages[:-1])
    assert [len(p["fans"]) for p in pages][:2] == [4, 4]
    assert {f["id"] for p in pages for f in p["fans"]} >= {f"ROS{i:03d}" for i in range(1, 11)}
    assert mirror == expected(stack, PROGRAM)


# ---------------------------------------------------------------- parameters


def test_both_parameter_locations(stack, http, keys):
    got = page(http, keys["todo"], limite=6)
    posted = page(http, keys["todo"], post=True, limite=6)
    assert [f["id"] for f in posted["fans"]] == [f["id"] for f in got["fans"]]
    # The cursors of either binding work in the other.
    by_post = page(http, keys["todo"], post=True, desde=got["siguiente"], limite=6)
    by_get = page(http, keys["todo"], desde=posted["siguiente"], limite=6)
    assert by_post["desde"] == got["siguiente"]
    assert [f["id"] for f in by_post["fans"]] == [f["id"] for f in by_get["fans"]]
    # POST: limite is a JSON number (the contract's type: a numeric string is refused);
    # desde null or empty = a new snapshot.
    assert len(page(http, keys["todo"], post=True, limite=2.0)["fans"]) == 2
    detalle = assert_error(
        call(http, keys["todo"], post=True, limite="2"), CodigoError.SOLICITUD_INVALIDA
    )["detalle"]
    assert detalle.startswith("limite: llegó un texto")
    assert page(http, keys["todo"], post=True, desde=None, limite=2)["desde"] == ""
    assert page(http, keys["todo"], post=True, desde="", limite=2)["desde"] == ""
    # GET: an empty desde is a new snapshot; an unknown parameter is ignored.
    response = http.get("/api/v1/roster?desde=&limite=2&otro=1", headers=auth(keys["todo"]))
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]["fans"]) == 2
    # POST with no body at all, and with an empty object: the defaults.
    empty = http.post("/api/v1/roster", headers=auth(keys["todo"]))
    assert empty.status_code == 200, empty.text
    assert len(empty.json()["data"]["fans"]) == len(expected(stack, PROGRAM))
    braces = http.post("/api/v1/roster", headers=auth(keys["todo"]), json={})
    assert braces.json()["data"]["fans"] == empty.json()["data"]["fans"]


def test_limite_default_and_maximum(stack, http, big_keys):
    default = page(http, big_keys["todo"])
    assert (len(default["fans"]), default["hay_mas"]) == (500, True)
    capped = page(http, big_keys["todo"], limite=5000)
    assert (len(capped["fans"]), capped["hay_mas"]) == (2000, True)
    rest = page(http, big_keys["todo"], limite=5000, desde=capped["siguiente"])
    assert (len(rest["fans"]), rest["hay_mas"]) == (1, False)
    posted = page(http, big_keys["todo"], post=True, limite=10**9)
    assert len(posted["fans"]) == 2000
    everyone = {f["id"] for f in capped["fans"]} | {f["id"] for f in rest["fans"]}
    assert everyone == set(expected(stack, BIG))


@pytest.mark.parametrize("limite", ["0", "-1", "abc", "1.5", "1e3", " "])
def test_limite_below_one_or_not_integer_get(http, keys, limite):
    response = http.get(f"/api/v1/roster?limite={limite}", headers=auth(keys["todo"]))
    if not limite.strip():  # blank = not sent
        assert response.status_code == 200
        return
    assert "limite" in assert_error(response, CodigoError.SOLICITUD_INVALIDA)["detalle"]


@pytest.mark.parametrize("limite", [0, -5, 1.5, "x", True, [10], {"n": 1}])
def test_limite_below_one_or_wrong_type_post(http, keys, limite):
    response = call(http, keys["todo"], post=True, limite=limite)
    assert "limite" in assert_error(response, CodigoError.SOLICITUD_INVALIDA)["detalle"]


def test_desde_of_wrong_json_type(http, keys):
    for desde in (True, [1], {"a": 1}):
        response = call(http, keys["todo"], post=True, desde=desde)
        assert "desde" in assert_error(response, CodigoError.SOLICITUD_INVALIDA)["detalle"]


def test_body_not_json(http, keys):
    response = http.post(
        "/api/v1/roster",
        headers={**auth(keys["todo"]), "Content-Type": "application/json"},
        content=b"{not json",
    )
    assert_error(response, CodigoError.SOLICITUD_INVALIDA)


# ---------------------------------------------------------------- cursors


def test_cursor_errors(stack, http, keys, other_keys):
    good = page(http, keys["todo"], limite=2)["siguiente"]
    other = page(http, other_keys["todo"], limite=1)["siguiente"]
    bad = [
        "garbage",
        good[:-1],
        good + "A",
        good[:-2] + ("AA" if good[-2:] != "AA" else "BB"),
        "0",
        "12345",
        other,
        "x" * 500,
    ]
    for desde in bad:
        for post in (False, True):
            response = call(http, keys["todo"], post=post, desde=desde)
            assert "desde" in assert_error(response, CodigoError.CURSOR_INVALIDO)["detalle"], desde
    # A number is allowed by the contract's type, but is never one of our cursors.
    for number in (12345, 0, 1.5):
        assert_error(call(http, keys["todo"], post=True, desde=number), CodigoError.CURSOR_INVALIDO)
    # Well formed and bound to the program, but never issued by this database (a position
    # beyond anything it has reached), or issued by another cluster.
    sistema = decode_cursor(PROGRAM, good).sistema
    for cursor, said in (
        (Cursor(sistema, Posicion(Fase.CAMBIOS, 2**62, 0)), "no emitió"),
        (Cursor(sistema ^ 1, Posicion(Fase.CAMBIOS, 5, 0)), "otra base de datos"),
    ):
        forged = encode_cursor(PROGRAM, cursor)
        detalle = assert_error(call(http, keys["todo"], desde=forged), CodigoError.CURSOR_INVALIDO)[
            "detalle"
        ]
        assert said in detalle
        assert forged not in detalle
    # Errors change nothing: the good cursor still works.
    page(http, keys["todo"], desde=good)


def test_cursor_is_bound_to_the_program_not_the_key(http, keys):
    """Any key of the program may continue the feed (a CRM may rotate its key)."""
    first = page(http, keys["todo"], limite=3)
    same = page(http, keys["prueba"], limite=3, desde=first["siguiente"])
    assert len(same["fans"]) == 3


def test_permission(http, keys):
    for key in ("tx", "redeem", "ping"):
        response = call(http, keys[key])
        assert "roster:leer" in assert_error(response, CodigoError.PERMISO_DENEGADO)["detalle"]


# ---------------------------------------------------------------- isolation


def test_program_isolation(stack, http, keys, other_keys):
    mine_cursor, mine = snapshot(stack, http, keys["todo"], limite=3)
    theirs_cursor, theirs = snapshot(stack, http, other_keys["todo"], limite=3)
    assert set(theirs) == {"OTR001", "OTR002"}
    assert not set(mine) & set(theirs)
    assert theirs == expected(stack, OTHER)
    # A change in one program is not in the other's feed.
    admin(
        stack,
        "AdjustPoints",
        bo.AdjustPointsRequest(programa=PROGRAM, fan="ROS010", puntos=3, motivo="aislamiento"),
    )
    _, pages = follow(http, other_keys["todo"], theirs_cursor, 3, theirs)
    assert all(not p["fans"] for p in pages)
    _, pages = follow(http, keys["todo"], mine_cursor, 3, mine)
    assert "ROS010" in {f["id"] for p in pages for f in p["fans"]}
    # Each program refuses the other's cursor.
    assert_error(call(http, other_keys["todo"], desde=mine_cursor), CodigoError.CURSOR_INVALIDO)
    assert_error(call(http, keys["todo"], desde=theirs_cursor), CodigoError.CURSOR_INVALIDO)


def test_exact_json_shape(http, keys):
    response = call(http, keys["todo"], limite=1)
    body = json.loads(response.content)
    entry = body["data"]["fans"][0]
    assert isinstance(entry["socio_desde"], int)
    assert isinstance(entry["puntos"], int)
    assert isinstance(body["data"]["hay_mas"], bool)
