"""Wallet pass: the outbox written with every balance change, and the sender that folds it
into wallet_pases and delivers the latest balance per fan (real PostgreSQL, local or
scripted providers)."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, TextClause, delete, func, insert, select, text

from loyalty_grpc.runtime.cli import main
from loyalty_grpc.store.autocommit import autocommit
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import (
    fans,
    programas,
    wallet_entregas,
    wallet_outbox,
    wallet_pases,
)
from loyalty_grpc.store.uow import UnitOfWork
from loyalty_grpc.store.wallet import BACKLOG_SQL, DUE_AT_ONCE, RECORD_SQL, TURN_SQL, ingest
from loyalty_grpc.wallet import (
    Backlog,
    Delivery,
    FanPass,
    LocalProvider,
    SendReport,
    WalletDeliveryError,
    WalletProvider,
    WalletSender,
    backlog,
    backoff,
    drain,
    pending_fans,
    send_pending,
)
from tests.support import insert_fan

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


class Clock:
    """A settable clock for leases and back-off."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


class Recording:
    """Records deliveries; fails for the fans in `failing` (a count each, or forever)."""

    def __init__(
        self,
        failing: dict[int, int] | None = None,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.delivered: list[tuple[int, int]] = []
        self.attempts: list[tuple[int, int]] = []
        self.failing = dict(failing or {})
        self.permanent = permanent
        self.retry_after = retry_after
        self.lock = threading.Lock()

    def deliver(self, fan: FanPass, saldo: int) -> None:
        with self.lock:
            self.attempts.append((fan.fan_pk, saldo))
            left = self.failing.get(fan.fan_pk, 0)
            if left:
                self.failing[fan.fan_pk] = left - 1
                raise WalletDeliveryError(
                    "wallet down", permanent=self.permanent, retry_after=self.retry_after
                )
            self.delivered.append((fan.fan_pk, saldo))


@pytest.fixture(scope="module", autouse=True)
def programa(engine: Engine) -> str:
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="halcones", nombre="Halcones", tasa_puntos="0.1"))
    return "halcones"


@pytest.fixture(autouse=True)
def _empty_wallet_tables(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (wallet_outbox, wallet_pases, wallet_entregas):
            conn.execute(delete(table))


@pytest.fixture
def new_fan(engine: Engine) -> Callable[[], int]:
    def create() -> int:
        return insert_fan(engine, "halcones", "HAL", next(_ids))

    return create


def change(engine: Engine, fan_pk: int, puntos: int) -> int:
    with UnitOfWork(engine) as uow:
        balance = move_points(uow.conn, "halcones", fan_pk, puntos, Motivo.VENTA)
        uow.commit()
    return balance


def outbox(engine: Engine, fan_pk: int | None = None) -> list[tuple[int, int]]:
    query = select(wallet_outbox.c.fan_pk, wallet_outbox.c.saldo).order_by(wallet_outbox.c.id)
    if fan_pk is not None:
        query = query.where(wallet_outbox.c.fan_pk == fan_pk)
    with engine.connect() as conn:
        return [(int(a), int(b)) for a, b in conn.execute(query)]


def pending(engine: Engine) -> dict[int, int]:
    """fan_pk -> the balance waiting for the sender: folded into wallet_pases, or newer in
    the outbox (not folded in yet; newer by (version, id), as the sender compares)."""
    with engine.connect() as conn:
        latest = {
            int(f): ((int(v or 0), int(i)), int(s))
            for f, v, i, s in conn.execute(
                select(
                    wallet_pases.c.fan_pk,
                    wallet_pases.c.saldo_version,
                    wallet_pases.c.saldo_id,
                    wallet_pases.c.saldo_pendiente,
                ).where(wallet_pases.c.saldo_pendiente.is_not(None))
            )
        }
        for f, v, i, s in conn.execute(
            select(
                wallet_outbox.c.fan_pk,
                wallet_outbox.c.version,
                wallet_outbox.c.id,
                wallet_outbox.c.saldo,
            )
        ):
            if (int(v or 0), int(i)) > latest.get(int(f), ((0, 0), 0))[0]:
                latest[int(f)] = ((int(v or 0), int(i)), int(s))
    return {f: s for f, (_, s) in latest.items()}


def entregas(engine: Engine) -> list[tuple[int, int, str]]:
    with engine.connect() as conn:
        return [
            (int(a), int(b), c)
            for a, b, c in conn.execute(
                select(
                    wallet_entregas.c.fan_pk, wallet_entregas.c.saldo, wallet_entregas.c.proveedor
                ).order_by(wallet_entregas.c.id)
            )
        ]


def state(engine: Engine, fan_pk: int) -> dict[str, object]:
    with engine.connect() as conn:
        row = conn.execute(select(wallet_pases).where(wallet_pases.c.fan_pk == fan_pk)).one()
    return dict(row._mapping)


# --- the outbox, written by move_points ---------------------------------------------------


def test_a_committed_change_writes_the_new_balance(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    fan = new_fan()
    assert change(engine, fan, 30) == 30
    assert change(engine, fan, -5) == 25
    assert outbox(engine, fan) == [(fan, 30), (fan, 25)]


def test_a_rolled_back_change_leaves_no_outbox_row(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    fan = new_fan()
    with UnitOfWork(engine) as uow:
        move_points(uow.conn, "halcones", fan, 40, Motivo.AJUSTE)
        inside = uow.conn.execute(
            select(func.count()).select_from(wallet_outbox).where(wallet_outbox.c.fan_pk == fan)
        ).scalar_one()
        # no commit: the unit of work rolls back
    assert inside == 1
    assert outbox(engine, fan) == []

    def failed_sale() -> None:
        with engine.begin() as conn:
            move_points(conn, "halcones", fan, 40, Motivo.VENTA)
            raise RuntimeError("the sale failed after the points moved")

    with pytest.raises(RuntimeError):
        failed_sale()
    assert outbox(engine, fan) == []
    with engine.connect() as conn:
        assert conn.execute(select(fans.c.puntos).where(fans.c.pk == fan)).scalar_one() == 0


def test_a_zero_point_move_writes_nothing(engine: Engine, new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    change(engine, fan, 10)
    assert change(engine, fan, 0) == 10
    assert outbox(engine, fan) == [(fan, 10)]


# --- send_pending ---------------------------------------------------------------------------


def test_three_changes_one_delivery_of_the_latest_balance(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    fan = new_fan()
    for puntos in (10, 20, 5):
        change(engine, fan, puntos)
    report = send_pending(engine, LocalProvider(engine), now=Clock())
    assert report == SendReport(claimed=1, delivered=1)
    assert entregas(engine) == [(fan, 35, "local")]
    assert outbox(engine) == []
    assert pending(engine) == {}
    st = state(engine, fan)
    assert st["entregado_saldo"] == 35
    assert st["entregado_en"] == T0
    assert st["intentos"] == 0
    assert st["ultimo_error"] is None
    assert send_pending(engine, LocalProvider(engine), now=Clock()) == SendReport()
    assert len(entregas(engine)) == 1


def test_two_fans_two_deliveries(engine: Engine, new_fan: Callable[[], int]) -> None:
    ana, beto = new_fan(), new_fan()
    change(engine, ana, 10)
    change(engine, beto, 7)
    change(engine, ana, 1)
    report = send_pending(engine, LocalProvider(engine), now=Clock())
    assert report.delivered == 2
    assert sorted(entregas(engine)) == sorted([(ana, 11, "local"), (beto, 7, "local")])
    assert pending(engine) == {}


def test_batch_limits_a_run_and_oldest_goes_first(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    first, second, third = new_fan(), new_fan(), new_fan()
    for fan in (first, second, third):
        change(engine, fan, 1)
    provider = Recording()
    assert send_pending(engine, provider, batch=2, now=Clock()).claimed == 2
    assert {f for f, _ in provider.delivered} == {first, second}
    assert send_pending(engine, provider, batch=2, now=Clock()).claimed == 1
    assert provider.delivered[-1] == (third, 1)


def test_failures_back_off_and_do_not_hold_up_other_fans(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    flaky, fine = new_fan(), new_fan()
    change(engine, flaky, 10)
    change(engine, fine, 3)
    provider = Recording(failing={flaky: 2})
    clock = Clock()

    report = send_pending(engine, provider, now=clock)
    assert report == SendReport(claimed=2, delivered=1, retrying=1)
    assert provider.delivered == [(fine, 3)]
    st = state(engine, flaky)
    assert st["intentos"] == 1
    assert st["ultimo_error"] == "wallet down"
    assert st["error_en"] == T0
    assert st["proximo_intento"] == T0 + timedelta(seconds=1)
    assert pending(engine) == {flaky: 10}

    # In back-off: not due, even when a newer balance arrives meanwhile; other fans go on.
    change(engine, flaky, 5)
    change(engine, fine, 1)
    clock.advance(0.5)
    assert send_pending(engine, provider, now=clock) == SendReport(claimed=1, delivered=1)
    assert provider.attempts.count((flaky, 15)) == 0

    clock.advance(0.5)  # due: the newest balance is attempted, fails again, waits 2 s
    assert send_pending(engine, provider, now=clock).retrying == 1
    assert provider.attempts[-1] == (flaky, 15)
    st = state(engine, flaky)
    assert st["intentos"] == 2
    assert st["proximo_intento"] == T0 + timedelta(seconds=3)
    assert pending(engine) == {flaky: 15}  # the older balance coalesced away
    assert outbox(engine) == []

    clock.advance(1.9)
    assert send_pending(engine, provider, now=clock) == SendReport()
    clock.advance(0.1)
    assert send_pending(engine, provider, now=clock) == SendReport(claimed=1, delivered=1)
    assert provider.delivered[-1] == (flaky, 15)
    st = state(engine, flaky)
    assert st["intentos"] == 0
    assert st["entregado_saldo"] == 15
    assert pending(engine) == {}


def test_backoff_doubles_up_to_five_minutes() -> None:
    assert [backoff(n).total_seconds() for n in range(1, 12)] == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        300,
        300,
    ]
    assert backoff(10_000) == timedelta(minutes=5)


def test_retry_after_from_the_provider_is_respected(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    fan = new_fan()
    change(engine, fan, 1)
    send_pending(engine, Recording(failing={fan: 1}, retry_after=30), now=Clock())
    assert state(engine, fan)["proximo_intento"] == T0 + timedelta(seconds=30)


def test_a_permanent_failure_drops_that_balance_only(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    fan = new_fan()
    change(engine, fan, 8)
    provider = Recording(failing={fan: 1}, permanent=True)
    clock = Clock()
    assert send_pending(engine, provider, now=clock) == SendReport(claimed=1, dropped=1)
    assert pending(engine) == {}
    st = state(engine, fan)
    assert st["ultimo_error"] == "permanente: wallet down"
    assert st["intentos"] == 0
    clock.advance(3600)
    assert send_pending(engine, provider, now=clock) == SendReport()  # not retried
    change(engine, fan, 1)  # the next balance change tries again
    assert send_pending(engine, provider, now=clock).delivered == 1
    assert provider.delivered == [(fan, 9)]


def test_an_unexpected_provider_error_is_retried(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    fan = new_fan()
    change(engine, fan, 2)

    class Broken:
        def deliver(self, fan: FanPass, saldo: int) -> None:
            raise KeyError("bug")

    assert send_pending(engine, Broken(), now=Clock()).retrying == 1
    assert state(engine, fan)["ultimo_error"] == "KeyError: 'bug'"
    assert pending(engine) == {fan: 2}


def test_stopping_hands_back_the_rest_of_the_batch(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    for _ in range(3):
        change(engine, new_fan(), 1)
    stop = threading.Event()

    class StopsAfterOne(Recording):
        def deliver(self, fan: FanPass, saldo: int) -> None:
            super().deliver(fan, saldo)
            stop.set()

    clock = Clock()
    report = send_pending(engine, StopsAfterOne(), workers=1, now=clock, stop=stop)
    assert report == SendReport(claimed=3, delivered=1, released=2)
    again = send_pending(engine, Recording(), now=clock)  # due at once, not after the lease
    assert again == SendReport(claimed=2, delivered=2)


def test_a_fan_being_delivered_is_not_claimed_again_and_sales_do_not_wait(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    """While one run is inside the provider call for a fan: the fan's sales commit at
    once (no lock to wait for), another run does not deliver that fan, and the newer
    balance is delivered by the next run after the first one finishes."""
    fan, other = new_fan(), new_fan()
    change(engine, fan, 10)
    inside, release = threading.Event(), threading.Event()

    class Blocking(Recording):
        def deliver(self, fan: FanPass, saldo: int) -> None:
            inside.set()
            assert release.wait(30)
            super().deliver(fan, saldo)

    clock = Clock()
    first = Blocking()
    reports: list[SendReport] = []
    worker = threading.Thread(target=lambda: reports.append(send_pending(engine, first, now=clock)))
    worker.start()
    try:
        assert inside.wait(30)
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert move_points(conn, "halcones", fan, 5, Motivo.VENTA) == 15
        change(engine, other, 1)
        second = Recording()
        assert send_pending(engine, second, now=clock) == SendReport(claimed=1, delivered=1)
        assert second.delivered == [(other, 1)]
    finally:
        release.set()
        worker.join(30)
    assert reports == [SendReport(claimed=1, delivered=1)]
    assert first.delivered == [(fan, 10)]
    assert pending(engine) == {fan: 15}  # folded in during the delivery: due at once
    third = Recording()
    assert send_pending(engine, third, now=clock).delivered == 1
    assert third.delivered == [(fan, 15)]


def test_a_sale_does_not_wait_for_a_claim_transaction(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """The sender's row locks are on wallet_pases only: a sale of a locked fan commits."""
    fan = new_fan()
    change(engine, fan, 1)
    send_pending(engine, Recording(failing={fan: 1}), now=Clock())  # creates its state row
    with engine.begin() as sender_conn:
        sender_conn.execute(
            select(wallet_pases)
            .where(wallet_pases.c.programa_id == "halcones", wallet_pases.c.fan_pk == fan)
            .with_for_update()
        )
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert move_points(conn, "halcones", fan, 1, Motivo.VENTA) == 2


def test_an_expired_lease_goes_to_the_next_sender(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """A run that overstays its lease loses the fan: its late outcome is not recorded."""
    fan = new_fan()
    change(engine, fan, 4)
    inside, release = threading.Event(), threading.Event()

    class Slow(Recording):
        def deliver(self, fan: FanPass, saldo: int) -> None:
            inside.set()
            assert release.wait(30)
            raise WalletDeliveryError("late failure")

    worker = threading.Thread(
        target=send_pending,
        args=(engine, Slow()),
        kwargs={"now": Clock(), "lease": timedelta(seconds=60)},
    )
    worker.start()
    try:
        assert inside.wait(30)
        later = Recording()
        report = send_pending(engine, later, now=Clock(T0 + timedelta(seconds=61)))
        assert report == SendReport(claimed=1, delivered=1)
    finally:
        release.set()
        worker.join(30)
    st = state(engine, fan)
    assert st["ultimo_error"] is None  # the slow run's failure was not written
    assert st["entregado_saldo"] == 4
    assert pending(engine) == {}


def test_concurrent_runs_never_deliver_a_fan_twice(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    fan_pks = [new_fan() for _ in range(40)]
    for i, fan in enumerate(fan_pks):
        change(engine, fan, i + 1)
        change(engine, fan, 100)
    # Every fan due: both runs find claims from the start.
    assert ingest(engine, "halcones", limit=1000) == (80, 40)
    in_flight: set[int] = set()
    overlaps: list[int] = []
    delivered: list[tuple[int, int, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(2)

    class Watching:
        def __init__(self, name: str) -> None:
            self.name = name

        def deliver(self, fan: FanPass, saldo: int) -> None:
            with lock:
                if fan.fan_pk in in_flight:
                    overlaps.append(fan.fan_pk)
                in_flight.add(fan.fan_pk)
            time.sleep(0.002)  # widen the window in which a second delivery would overlap
            with lock:
                in_flight.discard(fan.fan_pk)
                delivered.append((fan.fan_pk, saldo, self.name))

    def run(name: str) -> None:
        start.wait(30)
        provider = Watching(name)
        while send_pending(engine, provider, batch=3).claimed:
            pass

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert overlaps == []
    assert sorted((f, s) for f, s, _ in delivered) == sorted(
        (fan, i + 101) for i, fan in enumerate(fan_pks)
    )
    assert {name for _, _, name in delivered} == {"a", "b"}
    assert pending(engine) == {}


def test_rows_committed_out_of_order_are_not_lost(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """A balance whose transaction took a lower outbox id but commits after a run has
    folded in higher ids is delivered by the next run (no id high-water mark)."""
    early, late = new_fan(), new_fan()
    provider = Recording()
    with UnitOfWork(engine) as slow:
        move_points(slow.conn, "halcones", early, 5, Motivo.VENTA)
        slow_id = slow.conn.execute(select(func.max(wallet_outbox.c.id))).scalar_one()
        change(engine, late, 7)
        assert outbox(engine) == [(late, 7)]
        with engine.connect() as conn:
            assert conn.execute(select(wallet_outbox.c.id)).scalar_one() > slow_id
        assert send_pending(engine, provider, now=Clock()) == SendReport(claimed=1, delivered=1)
        slow.commit()
    assert outbox(engine) == [(early, 5)]
    assert send_pending(engine, provider, now=Clock()) == SendReport(claimed=1, delivered=1)
    assert provider.delivered == [(late, 7), (early, 5)]
    assert pending(engine) == {}


def test_an_older_balance_folded_late_never_replaces_a_newer_one(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    """Two senders fold one fan's rows in the wrong order (the older row was taken by one
    that is slow to fold it): the newer balance wins, and the older one is never sent,
    even after the newer one was delivered."""
    fan = new_fan()
    change(engine, fan, 10)
    change(engine, fan, 20)
    provider = Recording()
    with engine.begin() as other:  # another sender holds the older row
        other.execute(
            select(wallet_outbox.c.id)
            .where(wallet_outbox.c.programa_id == "halcones", wallet_outbox.c.saldo == 10)
            .with_for_update()
        )
        assert send_pending(engine, provider, now=Clock()).delivered == 1
        assert provider.delivered == [(fan, 30)]
        assert outbox(engine) == [(fan, 10)]
    report = send_pending(engine, provider, now=Clock())  # folds the older row in: no-op
    assert (report, report.ingested) == (SendReport(), 1)
    assert provider.delivered == [(fan, 30)]
    assert outbox(engine) == []
    assert pending(engine) == {}
    assert state(engine, fan)["entregado_saldo"] == 30


def test_fans_in_back_off_take_no_claims_from_others(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """Fans in back-off are outside the claim's range, however long they have waited and
    however often their balance changes: every run's batch goes to due fans."""
    stuck = [new_fan() for _ in range(5)]
    for fan in stuck:
        change(engine, fan, 1)
    clock = Clock()
    provider = Recording(failing=dict.fromkeys(stuck, 1000), retry_after=600)
    assert send_pending(engine, provider, now=clock).retrying == 5
    others = [new_fan() for _ in range(4)]
    for fan in stuck:
        change(engine, fan, 1)
    for fan in others:
        change(engine, fan, 2)
    clock.advance(60)
    for _ in range(2):
        assert send_pending(engine, provider, batch=2, now=clock) == SendReport(
            claimed=2, delivered=2
        )
    assert send_pending(engine, provider, batch=2, now=clock) == SendReport()
    assert sorted(provider.delivered) == sorted((fan, 2) for fan in others)
    assert pending(engine) == dict.fromkeys(stuck, 2)
    assert pending_fans(engine, now=clock()) == (5, 5)


def test_a_backlog_is_coalesced_and_a_large_one_spans_runs(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    fans_ = [new_fan() for _ in range(3)]
    for _ in range(10):
        for fan in fans_:
            change(engine, fan, 1)
    provider = Recording()
    report = send_pending(engine, provider, now=Clock())
    assert (report, report.ingested, report.more) == (SendReport(claimed=3, delivered=3), 30, False)
    assert sorted(provider.delivered) == sorted((fan, 10) for fan in fans_)

    for _ in range(10):
        for fan in fans_:
            change(engine, fan, 1)
    provider = Recording()
    first = send_pending(engine, provider, ingest_batch=4, ingest_rounds=2, now=Clock())
    assert (first.ingested, first.more) == (8, True)
    total = first + drain(engine, provider, ingest_batch=4, ingest_rounds=2, now=Clock())
    assert total.ingested == 30
    assert dict(provider.delivered) == dict.fromkeys(fans_, 20)  # the last per fan
    assert pending(engine) == {}


def test_a_program_with_a_huge_backlog_does_not_starve_the_others(
    engine: Engine, new_fan: Callable[[], int]
) -> None:
    """Thousands of balance changes in one program, older than a few in another: one
    sender run with a small batch delivers the small program's balances in its first
    round (each program gets its share of the batch), and the big program's share."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO programas (id, nombre, tasa_puntos) "
                "VALUES ('gaviotas', 'Gaviotas', 0.1) ON CONFLICT DO NOTHING"
            )
        )
    big = [new_fan() for _ in range(300)]
    with engine.begin() as conn:  # 3,000 changes, ten per fan, all before the small ones
        conn.execute(
            text(
                "INSERT INTO wallet_outbox (programa_id, fan_pk, saldo) "
                "SELECT 'halcones', f, g FROM unnest(CAST(:fans AS bigint[])) AS f, "
                "generate_series(1, 10) AS g ORDER BY g, f"
            ),
            {"fans": big},
        )
    small = [insert_fan(engine, "gaviotas", "GAV", next(_ids)) for _ in range(3)]
    for i, fan in enumerate(small):
        with UnitOfWork(engine) as uow:
            move_points(uow.conn, "gaviotas", fan, i + 1, Motivo.VENTA)
            uow.commit()
    provider = Recording()
    report = send_pending(engine, provider, batch=10, ingest_batch=500, now=Clock())
    delivered = dict(provider.delivered)
    assert {fan: delivered.get(fan) for fan in small} == {f: i + 1 for i, f in enumerate(small)}
    assert report.claimed == 10  # what the small program left went to the big one
    assert len(set(delivered) & set(big)) == 7
    assert report.more
    total = report + drain(engine, provider, batch=100, now=Clock())
    assert dict(provider.delivered) == {
        **dict.fromkeys(big, 10),
        **{f: i + 1 for i, f in enumerate(small)},
    }
    assert total.ingested == 3003
    assert pending(engine) == {}


def test_a_batch_provider_gets_one_call_and_reports_each_fan(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    ok, gone, busy = new_fan(), new_fan(), new_fan()
    for fan in (ok, gone, busy):
        change(engine, fan, 3)
    calls: list[list[int]] = []

    class Mixed:
        def deliver(self, fan: FanPass, saldo: int) -> None:
            raise AssertionError("a batch provider gets batches")

        def deliver_batch(self, batch: Sequence[Delivery]) -> list[Exception | None]:
            calls.append([d.fan.fan_pk for d in batch])
            return [
                None
                if d.fan.fan_pk == ok
                else WalletDeliveryError("no pass", permanent=True)
                if d.fan.fan_pk == gone
                else WalletDeliveryError("busy", retry_after=30)
                for d in batch
            ]

    clock = Clock()
    report = send_pending(engine, Mixed(), now=clock)
    assert report == SendReport(claimed=3, delivered=1, retrying=1, dropped=1)
    assert sorted(calls[0]) == sorted([ok, gone, busy])
    assert len(calls) == 1
    assert state(engine, ok)["entregado_saldo"] == 3
    assert state(engine, gone)["ultimo_error"] == "permanente: no pass"
    assert state(engine, busy)["proximo_intento"] == T0 + timedelta(seconds=30)
    assert pending(engine) == {busy: 3}

    class Down:
        def deliver(self, fan: FanPass, saldo: int) -> None:
            raise AssertionError("a batch provider gets batches")

        def deliver_batch(self, batch: Sequence[Delivery]) -> list[Exception | None]:
            raise ConnectionError("database gone")

    change(engine, ok, 1)
    clock.advance(60)
    assert send_pending(engine, Down(), now=clock) == SendReport(claimed=2, retrying=2)
    assert state(engine, ok)["ultimo_error"] == "ConnectionError: database gone"
    assert state(engine, ok)["intentos"] == 1
    assert state(engine, busy)["intentos"] == 2


def test_several_senders_share_the_work_while_sales_go_on(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    """Four senders (two handing batches to a batch provider, two delivering fan by fan)
    ingest, claim and record over the same outbox while three threads sell: no deadlock,
    never one fan in two deliveries at once, no balance delivered twice, and each fan's
    last delivery is its final balance."""
    fan_pks = [new_fan() for _ in range(25)]
    in_flight: set[int] = set()
    overlaps: list[int] = []
    delivered: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    sales_done = threading.Event()

    def enter(batch: Sequence[Delivery]) -> None:
        with lock:
            overlaps.extend(d.fan.fan_pk for d in batch if d.fan.fan_pk in in_flight)
            in_flight.update(d.fan.fan_pk for d in batch)
        time.sleep(0.001)  # widen the window in which a second delivery would overlap
        with lock:
            in_flight.difference_update(d.fan.fan_pk for d in batch)
            delivered.extend((d.fan.fan_pk, d.saldo) for d in batch)

    class OneByOne:
        def deliver(self, fan: FanPass, saldo: int) -> None:
            enter([Delivery(fan, saldo)])

    class Batches(OneByOne):
        def deliver_batch(self, batch: Sequence[Delivery]) -> list[Exception | None]:
            enter(batch)
            return [None] * len(batch)

    def sell(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(60):
                change(engine, rng.choice(fan_pks), rng.randint(1, 9))
        except BaseException as exc:
            errors.append(exc)

    def send(provider: WalletProvider) -> None:
        try:
            while True:
                report = send_pending(
                    engine, provider, batch=4, workers=2, ingest_batch=5, ingest_rounds=2
                )
                idle = not (report.more or report.claimed or report.ingested)
                if idle and sales_done.is_set():
                    return
        except BaseException as exc:
            errors.append(exc)

    sellers = [threading.Thread(target=sell, args=(n,)) for n in range(3)]
    senders = [
        threading.Thread(target=send, args=(p,))
        for p in (Batches(), Batches(), OneByOne(), OneByOne())
    ]
    for t in senders + sellers:
        t.start()
    for t in sellers:
        t.join(120)
    sales_done.set()
    for t in senders:
        t.join(120)
    assert not any(t.is_alive() for t in senders + sellers)
    assert errors == []
    assert overlaps == []
    assert len(delivered) == len(set(delivered))  # balances only grow: none sent twice
    with engine.connect() as conn:
        final = {
            int(f): int(p)
            for f, p in conn.execute(
                select(fans.c.pk, fans.c.puntos).where(fans.c.pk.in_(fan_pks), fans.c.puntos > 0)
            )
        }
    assert dict(delivered) == final  # the last delivery of each fan
    assert pending(engine) == {}


# --- bounded cost ------------------------------------------------------------------------


def _scans(plan: dict[str, Any], limited: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads a relation, and whether a
    Limit bounds it."""
    limited = limited or plan["Node Type"] == "Limit"
    if "Relation Name" in plan and plan["Node Type"] != "ModifyTable":
        yield plan, limited
    for child in plan.get("Plans", []):
        yield from _scans(child, limited)


def _assert_bounded(conn: Connection, statement: TextClause, params: dict[str, object]) -> int:
    """The plan reads wallet_outbox and wallet_pases only by index: key lookups (an index
    scan, or a bitmap of the keys' index entries), or range scans under a Limit. Returns
    how many such reads it has."""
    plan = conn.execute(text(f"EXPLAIN (FORMAT JSON) {statement.text}"), params).scalar_one()
    reads = [
        (node, limited)
        for node, limited in _scans(plan[0]["Plan"])
        if node["Relation Name"] in ("wallet_outbox", "wallet_pases")
    ]
    for node, limited in reads:
        if node["Node Type"] == "Bitmap Heap Scan":  # the rows of keys given (= ANY)
            assert "= ANY" in node.get("Recheck Cond", ""), node
            continue
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node
        lookup = "= ANY" in node.get("Index Cond", "") or " = " in node.get("Index Cond", "")
        assert limited or lookup, node
    return len(reads)


def _plans_inside(engine: Engine, call: str, params: dict[str, object]) -> list[dict[str, Any]]:
    """The plans of the statements a function call runs (auto_explain's plans of nested
    statements, sent as notices; the call rolled back), without the call's own."""
    plans: list[dict[str, Any]] = []
    with autocommit(engine) as conn:

        def keep(diag: psycopg.errors.Diagnostic) -> None:
            message = diag.message_primary or ""
            if "plan:" in message:
                plans.append(json.loads(message.split("plan:", 1)[1]))

        conn.add_notice_handler(keep)
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = 'json'",
            "SET auto_explain.log_settings = on",  # the planner settings it ran with
            "SET auto_explain.log_level = 'notice'",
            "SET client_min_messages = 'notice'",
        ):
            conn.execute(setting)
        conn.execute("BEGIN")
        conn.execute(call, params).fetchall()
        conn.execute("ROLLBACK")
        conn.execute("RESET ALL")
        conn.remove_notice_handler(keep)
    return [plan for plan in plans if "loyalty_wallet" not in plan["Query Text"]]


def _bounded_inside(engine: Engine, call: str, params: dict[str, object]) -> int:
    """Every statement a function call runs reads wallet_outbox and wallet_pases only as
    `_assert_bounded` allows. Returns how many such reads they have."""
    reads = 0
    for plan in _plans_inside(engine, call, params):
        for node, limited in _scans(plan["Plan"]):
            if node["Relation Name"] not in ("wallet_outbox", "wallet_pases"):
                continue
            reads += 1
            if node["Node Type"] == "Bitmap Heap Scan":
                assert "= ANY" in node.get("Recheck Cond", ""), node
                continue
            assert node["Node Type"] in ("Index Scan", "Index Only Scan"), plan["Query Text"]
            cond = node.get("Index Cond", "")
            assert limited or "= ANY" in cond or " = " in cond, (plan["Query Text"], node)
    return reads


def _waiting(engine: Engine, prefix: str, fans: int, *, rows_each: int) -> None:
    """`fans` new fans of halcones (Fan IDs `prefix` + n), `rows_each` outbox rows each,
    the oldest row of every fan folded into wallet_pases (a balance waiting), both tables
    analyzed."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token) "
                "SELECT 'halcones', :prefix || g, 'n', :prefix || g || '@x.example', 2020, "
                ":prefix || g FROM generate_series(1, :fans) AS g"
            ),
            {"prefix": prefix, "fans": fans},
        )
        conn.execute(
            text(
                # Ordered: the first `fans` rows (ids) one per fan, whichever way the
                # planner joins (unordered, a plan that looped over g inside each fan put
                # both of a fan's rows first, and the ingest below took half the fans).
                "INSERT INTO wallet_outbox (programa_id, fan_pk, saldo) "
                "SELECT programa_id, pk, g FROM fans, generate_series(1, :rows_each) AS g "
                "WHERE fan_id LIKE :prefix || '%' ORDER BY g, pk"
            ),
            {"prefix": prefix, "rows_each": rows_each},
        )
    assert ingest(engine, "halcones", limit=fans) == (fans, fans)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "ANALYZE wallet_outbox, wallet_pases"
        )


def _delivered(fan_pks: list[int], lease: datetime) -> dict[str, object]:
    """RECORD_SQL's parameters: every fan of `fan_pks` (of halcones, leased until `lease`)
    delivered a balance of 1 (saldo id 1, version 0)."""
    n = len(fan_pks)
    return {
        "programa": "halcones",
        "fan_pks": fan_pks,
        "saldo_ids": [1] * n,
        "versiones": [0] * n,
        "cubiertos": [True] * n,
        "intentos": [0] * n,
        "proximos": [T0] * n,
        "entregados": [1] * n,
        "errores": [None] * n,
        "lease_until": lease,
        "due": T0,
        "at": T0,
    }


def test_every_sender_statement_reads_a_bounded_part_of_the_backlog(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    """With thousands of outbox rows and waiting balances (analyzed), the ingest, the claim,
    the record and the backlog figures read them only by index, under a Limit or by key:
    no sequential scan, sort or aggregate over the outbox or over wallet_pases."""
    new_fan()
    _waiting(engine, "PLAN", 4000, rows_each=2)
    fan_pks = list(pending(engine))[:100]
    turn = {
        "programa": "halcones",
        "filas": 100,
        "fans": 100,
        "due": DUE_AT_ONCE,
        "now": T0,
        "lease_until": T0,
    }
    # The functions' statements, as auto_explain shows them (ingest: the outbox's oldest
    # rows, then the fold; claim: the due fans, then the lease; record: the lock, then the
    # update).
    assert _bounded_inside(engine, TURN_SQL, turn) >= 3
    assert _bounded_inside(engine, RECORD_SQL, _delivered(fan_pks, T0)) >= 2
    with engine.begin() as conn:
        assert _assert_bounded(conn, BACKLOG_SQL, {"cap": 101, "now": T0}) >= 6


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_the_record_never_reads_its_arrays_once_per_row(
    engine: Engine,
    new_fan: Callable[[], int],
) -> None:
    """The record's UPDATE joins the claimed rows to `unnest` of its arrays by hash
    (migration 0018): the lease it finds them by is a value the statistics have never
    seen, so the planner expects about one row and, left to itself, chose by a hair's
    cost (seen both ways on the same data) between a hash join and a nested loop that reads
    the whole unnest again per row (quadratic: 0.9 s for 1,000 fans in the reference
    benchmark's run). The function's setting (test_the_sender_plans_every_execution_…)
    must reach its statement: 2,000 fans waiting, analyzed, 200 claimed."""
    new_fan()
    _waiting(engine, "HASH", 2000, rows_each=1)
    lease = T0 + timedelta(minutes=5)
    turn = {
        "programa": "halcones",
        "filas": 0,
        "fans": 200,
        "due": DUE_AT_ONCE,
        "now": T0,
        "lease_until": lease,
    }
    with autocommit(engine) as conn:
        claimed = [row[2] for row in conn.execute(TURN_SQL, turn).fetchall()[1:]]
    assert len(claimed) == 200
    random.Random(7).shuffle(claimed)  # the order the provider's outcomes come back in
    [update] = [
        plan
        for plan in _plans_inside(engine, RECORD_SQL, _delivered(claimed, lease))
        if plan["Query Text"].lstrip().startswith("UPDATE")
    ]
    joins = [
        node["Node Type"]
        for node in _nodes(update["Plan"])
        if "Join" in node["Node Type"] or node["Node Type"] == "Nested Loop"
    ]
    assert joins == ["Hash Join"], joins
    # Planned with the function's setting (without it the planner chose this same plan
    # on this data as often as not: the setting, seen here, is what makes it sure).
    assert update["Settings"].get("enable_nestloop") == "off", update["Settings"]


def test_the_sender_plans_every_execution_for_its_parameters(
    db_url: str,
    new_fan: Callable[[], int],
) -> None:
    """psycopg prepares a statement after 5 executions, and PostgreSQL considers a generic
    plan after 5 more: it must never use one (chosen while the outbox was nearly empty, it
    would scan the outbox whole). The sender's statements run inside its functions, which
    carry `plan_cache_mode = force_custom_plan` (migration 0016)."""
    single = make_engine(db_url, pool_size=1)  # one connection, reused by every step
    try:
        fan = new_fan()
        provider = Recording()
        for n in range(15):
            change(single, fan, 1)
            assert send_pending(single, provider, now=Clock()).delivered == 1
            assert provider.delivered[-1] == (fan, n + 1)
        with single.connect() as conn:
            settings = conn.execute(
                text(
                    "SELECT proname, proconfig FROM pg_proc "
                    "WHERE proname IN ('loyalty_wallet_turno', 'loyalty_wallet_record')"
                )
            ).all()
    finally:
        single.dispose()
    # The sender's statements run inside its two functions, which plan them afresh.
    # The record also never joins in a nested loop (migration 0018).
    assert dict(settings) == {
        "loyalty_wallet_turno": ["plan_cache_mode=force_custom_plan"],
        "loyalty_wallet_record": ["plan_cache_mode=force_custom_plan", "enable_nestloop=off"],
    }


def test_backlog_figures(engine: Engine, new_fan: Callable[[], int]) -> None:
    """Exact while small; beyond the cap an estimate, said to be one."""
    resting, backing_off, fresh = new_fan(), new_fan(), new_fan()
    with engine.connect() as conn:
        assert backlog(conn) == Backlog(fans=0, waiting=0, oldest_seconds=0, exact=True)
    change(engine, resting, 1)
    change(engine, backing_off, 1)
    send_pending(engine, Recording(failing={backing_off: 1}, retry_after=600))
    change(engine, backing_off, 1)  # in the outbox, and already waiting in wallet_pases
    change(engine, fresh, 1)
    with engine.connect() as conn:
        found = backlog(conn)
        assert (found.fans, found.waiting, found.exact) == (2, 1, True)
        assert 0 <= found.oldest_seconds < 60
        capped = backlog(conn, cap=1)
        assert not capped.exact
        assert capped.fans >= 2
        assert capped.waiting == 1
    assert pending_fans(engine) == (2, 1)


def test_the_status_line_says_when_it_estimates() -> None:
    from loyalty_grpc.runtime.cli.status import _backlog_text

    assert _backlog_text(Backlog(fans=0, waiting=0, oldest_seconds=0, exact=True)) == (
        "0 fans pending"
    )
    assert _backlog_text(Backlog(fans=12, waiting=2, oldest_seconds=3, exact=True)) == (
        "12 fans pending (2 waiting for a retry), oldest 3 s ago"
    )
    assert _backlog_text(
        Backlog(fans=1_200_000, waiting=10_000, oldest_seconds=840, exact=False)
    ) == ("≈ 1200000 fans pending (estimate; 10000+ waiting for a retry), oldest 14 min ago")


# --- the background sender and the CLI --------------------------------------------------------


def _wait_for(condition: Callable[[], bool], deadline_seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_the_sender_thread_delivers_on_its_own(engine: Engine, new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    sender = WalletSender(engine, LocalProvider(engine), interval=0.05)
    sender.start()
    try:
        change(engine, fan, 12)
        change(engine, fan, 1)
        assert _wait_for(lambda: (fan, 13, "local") in entregas(engine))
        assert _wait_for(lambda: pending(engine) == {})
    finally:
        sender.stop()
    # Delivered once or twice (12 then 13, if the thread ran between the changes).
    assert entregas(engine)[-1] == (fan, 13, "local")
    assert {saldo for _, saldo, _ in entregas(engine)} <= {12, 13}


def test_wake_runs_the_sender_at_once(engine: Engine, new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    sender = WalletSender(engine, LocalProvider(engine), interval=3600)
    sender.start()
    try:
        change(engine, fan, 6)
        sender.wake()
        assert _wait_for(lambda: entregas(engine) == [(fan, 6, "local")])
    finally:
        sender.stop()
    sender.stop()  # twice is fine


def test_cli_wallet_send(
    engine: Engine,
    db_url: str,
    new_fan: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ok, failing = new_fan(), new_fan()
    change(engine, failing, 4)
    # The failing fan is in back-off (an earlier failure, as of now).
    send_pending(engine, Recording(failing={failing: 1}, retry_after=600))
    change(engine, ok, 3)
    monkeypatch.setenv("LOYALTY_DATABASE_URL", db_url)
    monkeypatch.delenv("LOYALTY_WALLET_PROVIDER", raising=False)
    assert main(["wallet", "send"]) == 0
    out = capsys.readouterr().out
    assert "wallet (local): 1 delivered, 0 to retry, 0 dropped, 0 released" in out
    assert "1 fans pending, 1 of them waiting for a retry" in out
    assert sorted(entregas(engine)) == [(ok, 3, "local")]
    assert pending_fans(engine) == (1, 1)


def test_cli_wallet_send_rejects_a_bad_provider(
    monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    monkeypatch.setenv("LOYALTY_DATABASE_URL", db_url)
    monkeypatch.setenv("LOYALTY_WALLET_PROVIDER", "apple")
    with pytest.raises(SystemExit) as exc:
        main(["wallet", "send"])
    assert str(exc.value) == (
        "error: LOYALTY_WALLET_PROVIDER must be one of local, google, got 'apple'"
    )


def test_cli_wallet_send_needs_a_migrated_database(
    create_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOYALTY_DATABASE_URL", create_database())
    monkeypatch.delenv("LOYALTY_WALLET_PROVIDER", raising=False)
    monkeypatch.delenv("LOYALTY_PROG", raising=False)  # as run outside ./dev
    assert main(["wallet", "send"]) == 2  # the rule of `loyalty serve` (test_schema_check.py)
    assert capsys.readouterr().err.startswith("error: the database is not migrated (")
