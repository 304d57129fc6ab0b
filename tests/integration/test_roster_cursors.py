"""Roster cursors bound to the database that issued them (issue 24 §2), on real PostgreSQL:
a cursor is honoured only by the cluster whose system identifier it carries and only when
the database holds the record that it issued it (store/roster_cursors.py). Everything
else is cursor_invalido with a detalle that says which, never echoing the cursor; a
refusal changes nothing. A polling follower adds no records; identical pages read at once
all succeed. (The failover and the point-in-time restore themselves: tests/reliability/.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, delete, func, select, text

from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.roster_cursor import (
    Cursor,
    Fase,
    Posicion,
    decode_cursor,
    encode_cursor,
    sistema_of,
)
from loyalty_grpc.services.backoffice.fans import update_fan
from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.services.pos.roster import RosterPage, read_roster
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.tables import roster_cursores
from loyalty_grpc.store.uow import run_in_uow

PROGRAM = "cursores"
FANS = 9


def _load(engine: Engine) -> None:
    document = {
        "programas": [
            {
                "id": PROGRAM,
                "nombre": "Club Cursores",
                "tasa_puntos": "0.1",
                "claves": [
                    {
                        "clave": "lp_vivo_CursoresRoster000000000000001",
                        "integracion": "CRM",
                        "permisos": ["roster:leer"],
                    }
                ],
                "fans": [
                    {
                        "id": f"CUR{i:02}",
                        "nombre": f"Fan {i}",
                        "correo": f"cur{i}@example.com",
                        "socio_desde": 2020,
                        "temporadas": 1,
                        "qr_token": f"qrcur{i}",
                        "puntos": 10 * i,
                    }
                    for i in range(1, FANS + 1)
                ],
            }
        ]
    }
    run_in_uow(engine, apply_fixture, json.dumps(document))


@pytest.fixture(scope="module")
def eng(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url, pool_size=8)
    _load(engine)
    yield engine
    engine.dispose()


def page(engine: Engine, desde: str | None, limite: int = 4) -> RosterPage:
    return read_roster(engine, PROGRAM, desde, limite, settle_seconds=0)


def follow(engine: Engine, desde: str | None, limite: int = 4) -> tuple[str, list[str]]:
    """Every page from `desde` to the end of the feed: (the last cursor, the fans seen)."""
    seen: list[str] = []
    while True:
        got = page(engine, desde, limite)
        seen += [f.fan_id for f in got.fans]
        desde = got.siguiente
        if not got.hay_mas:
            return desde, seen


def records(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(roster_cursores)
                .where(roster_cursores.c.programa_id == PROGRAM)
            ).scalar_one()
        )


def refused(engine: Engine, desde: str) -> str:
    with pytest.raises(LoyaltyError) as caught:
        page(engine, desde)
    assert caught.value.codigo is CodigoError.CURSOR_INVALIDO
    assert desde not in caught.value.detalle
    return caught.value.detalle


def system_identifier(engine: Engine) -> int:
    with engine.connect() as conn:
        shown = conn.execute(text("SELECT system_identifier FROM pg_control_system()")).scalar_one()
    return sistema_of(int(shown))


def test_every_cursor_handed_out_is_recorded_with_the_clusters_identity(eng):
    before = records(eng)
    cursor, seen = follow(eng, None)
    assert sorted(seen) == [f"CUR{i:02}" for i in range(1, FANS + 1)]
    # 9 fans in pages of 4: two snapshot cursors and the snapshot's end.
    assert records(eng) == before + 3
    decoded = decode_cursor(PROGRAM, cursor)
    assert decoded.sistema == system_identifier(eng)
    assert decoded.posicion.fase is Fase.CAMBIOS
    with eng.connect() as conn:
        stored = conn.execute(
            select(roster_cursores.c.sistema, roster_cursores.c.xid, roster_cursores.c.pk).where(
                roster_cursores.c.programa_id == PROGRAM,
                roster_cursores.c.fase == Fase.CAMBIOS.value,
                roster_cursores.c.xid == decoded.posicion.xid,
                roster_cursores.c.pk == decoded.posicion.pk,
            )
        ).all()
    assert [(sistema_of(s), x, p) for s, x, p in stored] == [
        (decoded.sistema, decoded.posicion.xid, decoded.posicion.pk)
    ]


def test_a_polling_follower_adds_no_records(eng):
    cursor, _ = follow(eng, None)
    before = records(eng)
    for _ in range(5):
        quiet = page(eng, cursor)
        assert (quiet.fans, quiet.hay_mas, quiet.siguiente) == ([], False, cursor)
    # Other transactions move the database's horizon on; the follower's cursor stays put.
    for n in range(3):
        with eng.begin() as conn:
            conn.execute(text("SELECT pg_current_xact_id()"))
        assert page(eng, cursor).siguiente == cursor, n
    assert records(eng) == before
    # A page with a change hands out (and records) one new cursor, once.
    run_in_uow(eng, update_fan, PROGRAM, "CUR03", nombre="Cambiado")
    changed = page(eng, cursor)
    assert [f.fan_id for f in changed.fans] == ["CUR03"]
    assert changed.siguiente != cursor
    assert records(eng) == before + 1
    # The same page read again (a retry) answers the same and records nothing new.
    again = page(eng, cursor)
    assert (again.fans, again.siguiente) == (changed.fans, changed.siguiente)
    assert page(eng, changed.siguiente).siguiente == changed.siguiente
    assert records(eng) == before + 1


def read_at_once(engine: Engine, desde: str, n: int = 8) -> list[RosterPage | BaseException]:
    """`n` threads read the page after `desde` at the same moment."""
    start = threading.Barrier(n)
    results: list[RosterPage | BaseException] = []

    def read() -> None:
        start.wait()
        try:
            results.append(page(engine, desde))
        except BaseException as exc:  # reported by the caller
            results.append(exc)

    threads = [threading.Thread(target=read) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_identical_pages_read_at_once(eng):
    """Many followers (or retries) reading the same page at the same time, a page of the
    snapshot (its record updated in place on a conflict) and a page of changes (insert or
    nothing): every read succeeds with the same cursor, recorded once."""
    in_snapshot = page(eng, None).siguiente
    end, _ = follow(eng, None)
    run_in_uow(eng, update_fan, PROGRAM, "CUR05", nombre="Concurrente")
    for desde in (in_snapshot, end):
        before = records(eng)
        results = read_at_once(eng, desde)
        assert all(isinstance(r, RosterPage) for r in results), results
        pages = [r for r in results if isinstance(r, RosterPage)]
        assert len({p.siguiente for p in pages}) == 1
        assert pages[0].fans
        # (A snapshot's cursor may already be recorded: two snapshots begun with no
        # transaction between them share their horizon.)
        assert records(eng) == before + 1 or (desde == in_snapshot and records(eng) == before)


def test_a_cursor_of_another_cluster_is_refused(eng):
    cursor, _ = follow(eng, None)
    decoded = decode_cursor(PROGRAM, cursor)
    foreign = encode_cursor(PROGRAM, Cursor(decoded.sistema ^ 0x5A5A, decoded.posicion))
    before = records(eng)
    assert "otra base de datos" in refused(eng, foreign)
    assert records(eng) == before
    page(eng, cursor)  # a refusal changes nothing


def test_forged_cursors_never_issued_are_refused(eng):
    """Valid checksum, this cluster's identity, a plausible position: not issued here."""
    cursor, _ = follow(eng, None)
    decoded = decode_cursor(PROGRAM, cursor)
    p = decoded.posicion
    forged = [
        Posicion(Fase.CAMBIOS, p.xid, p.pk + 1),
        Posicion(Fase.CAMBIOS, max(p.xid - 1, 0), 0),
        Posicion(Fase.FOTO, p.xid, 1),
        Posicion(Fase.CAMBIOS, 2**62, 0),  # beyond anything the database has reached
    ]
    before = records(eng)
    for posicion in forged:
        assert "no emitió" in refused(
            eng, encode_cursor(PROGRAM, Cursor(decoded.sistema, posicion))
        )
    assert records(eng) == before
    page(eng, cursor)


def test_a_cursor_whose_record_is_gone_is_refused(eng):
    """What a restore to a point before the cursor was issued looks like to the feed."""
    cursor, _ = follow(eng, None)
    run_in_uow(eng, update_fan, PROGRAM, "CUR07", nombre="Perdido")
    later = page(eng, cursor).siguiente
    p = decode_cursor(PROGRAM, later).posicion
    with eng.begin() as conn:
        conn.execute(
            delete(roster_cursores).where(
                roster_cursores.c.programa_id == PROGRAM,
                roster_cursores.c.fase == p.fase.value,
                roster_cursores.c.xid == p.xid,
                roster_cursores.c.pk == p.pk,
            )
        )
    assert "no emitió" in refused(eng, later)
    # The earlier cursor (still recorded) continues, with nothing skipped.
    assert "CUR07" in follow(eng, cursor)[1]


def test_a_cursor_of_another_database_of_the_same_cluster_is_refused(
    eng, create_database: Callable[[], str]
):
    """A second database of the session's server shares its system identifier (one
    cluster) but holds none of this one's records: a database restored beside it from a
    logical dump, or a fresh one, refuses the cursors it did not issue (the cursor pasted
    from the README that a fresh database once took)."""
    cursor, _ = follow(eng, None)
    url = create_database()
    upgrade(url)
    other = make_engine(url, pool_size=2)
    try:
        _load(other)
        assert system_identifier(other) == decode_cursor(PROGRAM, cursor).sistema
        assert "no emitió" in refused(other, cursor)
        # Its own cursors work there and not here.
        own, seen = follow(other, None)
        assert len(seen) == FANS
        assert "no emitió" in refused(eng, own)
    finally:
        other.dispose()


def test_version_1_cursors_are_refused(eng):
    """The previous format carried no identity and left no record: one new snapshot."""
    import base64
    import hashlib
    import struct

    body = struct.pack(">BBQQ", 1, Fase.CAMBIOS.value, 1000, 0)
    tag = hashlib.sha256(b"loyalty roster cursor\x00" + PROGRAM.encode() + b"\x00" + body)
    old = base64.urlsafe_b64encode(body + tag.digest()[:8]).rstrip(b"=").decode()
    assert "versión anterior" in refused(eng, old)


def record_version(engine: Engine, cursor: str) -> int:
    """The transaction that last wrote `cursor`'s record (its row's xmin)."""
    p = decode_cursor(PROGRAM, cursor).posicion
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT xmin::text::bigint FROM roster_cursores WHERE programa_id = :p"
                    " AND fase = :f AND xid = :x AND pk = :k"
                ),
                {"p": PROGRAM, "f": p.fase.value, "x": p.xid, "k": p.pk},
            ).scalar_one()
        )


def test_a_snapshot_page_read_again_rewrites_its_record_a_change_page_does_not(eng):
    """A snapshot page shows its fans as they are now, so a second read of it must commit
    (and wait for a synchronous standby) after what it showed: its record is rewritten in
    place. A page of changes shows only what an earlier read of the same cursor could
    already show: its record is left as it is (docs/roster.md)."""
    first = page(eng, None)
    again = [page(eng, first.siguiente) for _ in range(2)]
    assert again[0].siguiente == again[1].siguiente
    snapshot_versions = {record_version(eng, again[0].siguiente)}
    page(eng, first.siguiente)
    snapshot_versions.add(record_version(eng, again[0].siguiente))
    assert len(snapshot_versions) == 2
    end, _ = follow(eng, None)
    run_in_uow(eng, update_fan, PROGRAM, "CUR02", nombre="Dos veces")
    changes = page(eng, end)
    version = record_version(eng, changes.siguiente)
    assert page(eng, end).siguiente == changes.siguiente
    assert record_version(eng, changes.siguiente) == version
