"""A roster follower as a CRM would write one (docs/roster.md "How to sync"), over the
service's HTTP API, and the roster changes the reliability tests make while it follows.

The follower keeps a mirror (Fan ID -> the entry's fields) and its cursor; it retries 502,
503 and 504 as docs/errors.md says (the harness's Client), counts its snapshots and records
every `cursor_invalido` it gets instead of hiding it: the tests decide what is allowed."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from loyalty_grpc.services.backoffice.fans import deactivate_fan, register_fan, update_fan
from loyalty_grpc.store.uow import run_in_uow
from tests.reliability.harness import PROGRAM, Client, Journal, Policy, Sale, Stack

LIMITE = 5
# What a mirror compares: the entry fields a change can move.
Entry = tuple[str, int, str, str]  # nombre, puntos, estado, correo

T = TypeVar("T")


class CursorRefusedError(Exception):
    """The feed answered 400 cursor_invalido to the follower's cursor."""

    def __init__(self, detalle: str) -> None:
        super().__init__(detalle)
        self.detalle = detalle


def _entry(fan: dict[str, Any]) -> Entry:
    return (fan["nombre"], fan["puntos"], fan["estado"], fan["correo"])


@dataclass
class Follower:
    stack: Stack
    journal: Journal
    mirror: dict[str, Entry] = field(default_factory=dict)
    cursor: str | None = None
    snapshots: int = 0
    pages: int = 0

    def page(self, desde: str | None) -> dict[str, Any]:
        body: dict[str, object] = {"limite": LIMITE}
        if desde is not None:
            body["desde"] = desde
        with Client(self.stack.base_url, self.journal, Policy(deadline=60.0)) as client:
            reply = client.call("/api/v1/roster", body)
        last = reply.last
        if last.status == 400 and last.codigo == "cursor_invalido":
            assert isinstance(last.body, dict)
            raise CursorRefusedError(last.body["error"]["detalle"])
        assert last.status == 200, f"roster page: {last}"
        self.pages += 1
        return reply.data

    def sync(self) -> None:
        """Page from the cursor (a snapshot when there is none) to the end of the feed,
        upserting every entry; CursorRefusedError as it came."""
        if self.cursor is None:
            self.snapshots += 1
        while True:
            data = self.page(self.cursor)
            self.mirror.update({fan["id"]: _entry(fan) for fan in data["fans"]})
            self.cursor = data["siguiente"]
            if not data["hay_mas"]:
                return

    def snapshot_again(self) -> None:
        """What docs/roster.md says to do after cursor_invalido: a new snapshot, which
        replaces the mirror."""
        self.mirror, self.cursor = {}, None
        self.sync()


def truth(engine: Engine) -> dict[str, Entry]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT fan_id, nombre, puntos, estado, correo FROM fans WHERE programa_id = :p"),
            {"p": PROGRAM},
        ).all()
    return {r.fan_id: (r.nombre, r.puntos, r.estado, r.correo) for r in rows}


def differences(mirror: dict[str, Entry], db: dict[str, Entry]) -> list[str]:
    return sorted(f for f in mirror.keys() | db.keys() if mirror.get(f) != db.get(f))


def retrying(engine: Engine, work: Callable[[], T], deadline: float = 60.0) -> T:
    """`work` retried while the database is unreachable (a failover, a restore)."""
    end = time.monotonic() + deadline
    while True:
        try:
            return work()
        except DBAPIError:
            if time.monotonic() > end:
                raise
            engine.dispose()
            time.sleep(0.2)


_serial = itertools.count(1)


def change_roster(stack: Stack, journal: Journal, tag: str, rounds: int = 3) -> None:
    """`rounds` of roster changes, each in transactions of its own: a sale through the API
    (a balance), a profile edit and a registration through the back office's use cases,
    and every third round a `baja`."""
    fan_ids = sorted(stack.world.fans)
    with Client(stack.base_url, journal, Policy(deadline=60.0)) as client:
        for n in range(rounds):
            k = next(_serial)
            fan = fan_ids[k % len(fan_ids)]
            reply = stack.book.sale(client, Sale(f"roster-{tag}-{k}", fan, 1000 + 100 * k))
            assert reply.status == 200, reply.last
            edited = fan_ids[(k * 7) % len(fan_ids)]
            engine = stack.engine
            retrying(
                engine,
                partial(run_in_uow, engine, update_fan, PROGRAM, edited, nombre=f"Fan {tag} {k}"),
            )
            new = f"ROS{tag.upper()}{k:03}"
            retrying(
                engine,
                partial(
                    run_in_uow,
                    engine,
                    register_fan,
                    PROGRAM,
                    new,
                    nombre=f"Nuevo {new}",
                    correo=f"{new.lower()}@example.com",
                    socio_desde=2024,
                ),
            )
            if n % 3 == 2:
                retrying(
                    engine,
                    partial(run_in_uow, engine, deactivate_fan, PROGRAM, new, "prueba de baja"),
                )
