"""Wallet pass: the outbox written with every balance change, and the sender that
delivers the latest balance per fan (real PostgreSQL, local or scripted providers)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, delete, func, insert, select, text

from loyalty_grpc.runtime.cli import main
from loyalty_grpc.store.ledger import Motivo, move_points
from loyalty_grpc.store.tables import (
    fans,
    programas,
    wallet_entregas,
    wallet_outbox,
    wallet_pases,
)
from loyalty_grpc.store.uow import UnitOfWork
from loyalty_grpc.wallet import (
    FanPass,
    LocalProvider,
    SendReport,
    WalletDeliveryError,
    WalletSender,
    backoff,
    pending_fans,
    send_pending,
)

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

    def __init__(self, failing: dict[int, int] | None = None, *, permanent: bool = False,
                 retry_after: float | None = None) -> None:
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
                raise WalletDeliveryError("wallet down", permanent=self.permanent,
                                          retry_after=self.retry_after)
            self.delivered.append((fan.fan_pk, saldo))


@pytest.fixture(scope="module", autouse=True)
def programa(engine: Engine) -> str:
    with engine.begin() as conn:
        conn.execute(insert(programas).values(id="halcones", nombre="Halcones",
                                               tasa_puntos="0.1"))
    return "halcones"


@pytest.fixture(autouse=True)
def _empty_wallet_tables(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (wallet_outbox, wallet_pases, wallet_entregas):
            conn.execute(delete(table))


@pytest.fixture
def new_fan(engine: Engine) -> Callable[[], int]:
    def create() -> int:
        n = next(_ids)
        with engine.begin() as conn:
            return int(conn.execute(insert(fans).values(
                programa_id="halcones", fan_id=f"HAL{n:04d}", nombre=f"Fan {n}",
                correo=f"fan{n}@example.com", socio_desde=2020, qr_token=f"q{n}",
            ).returning(fans.c.pk)).scalar_one())
    return create


def change(engine: Engine, fan_pk: int, puntos: int) -> int:
    with UnitOfWork(engine) as uow:
        balance = move_points(uow.conn, fan_pk, puntos, Motivo.VENTA)
        uow.commit()
    return balance


def outbox(engine: Engine, fan_pk: int | None = None) -> list[tuple[int, int]]:
    query = select(wallet_outbox.c.fan_pk, wallet_outbox.c.saldo).order_by(wallet_outbox.c.id)
    if fan_pk is not None:
        query = query.where(wallet_outbox.c.fan_pk == fan_pk)
    with engine.connect() as conn:
        return [(int(a), int(b)) for a, b in conn.execute(query)]


def entregas(engine: Engine) -> list[tuple[int, int, str]]:
    with engine.connect() as conn:
        return [(int(a), int(b), c) for a, b, c in conn.execute(
            select(wallet_entregas.c.fan_pk, wallet_entregas.c.saldo, wallet_entregas.c.proveedor)
            .order_by(wallet_entregas.c.id))]


def state(engine: Engine, fan_pk: int) -> dict[str, object]:
    with engine.connect() as conn:
        row = conn.execute(select(wallet_pases).where(wallet_pases.c.fan_pk == fan_pk)).one()
    return dict(row._mapping)


# --- the outbox, written by move_points ---------------------------------------------------

def test_a_committed_change_writes_the_new_balance(engine: Engine, new_fan: Callable[[], int],
                                                   ) -> None:
    fan = new_fan()
    assert change(engine, fan, 30) == 30
    assert change(engine, fan, -5) == 25
    assert outbox(engine, fan) == [(fan, 30), (fan, 25)]


def test_a_rolled_back_change_leaves_no_outbox_row(engine: Engine,
                                                   new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    with UnitOfWork(engine) as uow:
        move_points(uow.conn, fan, 40, Motivo.AJUSTE)
        inside = uow.conn.execute(select(func.count()).select_from(wallet_outbox)
                                  .where(wallet_outbox.c.fan_pk == fan)).scalar_one()
        # no commit: the unit of work rolls back
    assert inside == 1
    assert outbox(engine, fan) == []

    def failed_sale() -> None:
        with engine.begin() as conn:
            move_points(conn, fan, 40, Motivo.VENTA)
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
    engine: Engine, new_fan: Callable[[], int],
) -> None:
    fan = new_fan()
    for puntos in (10, 20, 5):
        change(engine, fan, puntos)
    report = send_pending(engine, LocalProvider(engine), now=Clock())
    assert report == SendReport(claimed=1, delivered=1)
    assert entregas(engine) == [(fan, 35, "local")]
    assert outbox(engine) == []
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
    assert outbox(engine) == []


def test_batch_limits_a_run_and_oldest_goes_first(engine: Engine,
                                                  new_fan: Callable[[], int]) -> None:
    first, second, third = new_fan(), new_fan(), new_fan()
    for fan in (first, second, third):
        change(engine, fan, 1)
    provider = Recording()
    assert send_pending(engine, provider, batch=2, now=Clock()).claimed == 2
    assert {f for f, _ in provider.delivered} == {first, second}
    assert send_pending(engine, provider, batch=2, now=Clock()).claimed == 1
    assert provider.delivered[-1] == (third, 1)


def test_failures_back_off_and_do_not_hold_up_other_fans(
    engine: Engine, new_fan: Callable[[], int],
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
    assert outbox(engine, flaky) == [(flaky, 10)]

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
    assert outbox(engine, flaky) == [(flaky, 15)]  # older row coalesced away

    clock.advance(1.9)
    assert send_pending(engine, provider, now=clock) == SendReport()
    clock.advance(0.1)
    assert send_pending(engine, provider, now=clock) == SendReport(claimed=1, delivered=1)
    assert provider.delivered[-1] == (flaky, 15)
    st = state(engine, flaky)
    assert st["intentos"] == 0
    assert st["entregado_saldo"] == 15
    assert outbox(engine) == []


def test_backoff_doubles_up_to_five_minutes() -> None:
    assert [backoff(n).total_seconds() for n in range(1, 12)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert backoff(10_000) == timedelta(minutes=5)


def test_retry_after_from_the_provider_is_respected(engine: Engine,
                                                   new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    change(engine, fan, 1)
    send_pending(engine, Recording(failing={fan: 1}, retry_after=30), now=Clock())
    assert state(engine, fan)["proximo_intento"] == T0 + timedelta(seconds=30)


def test_a_permanent_failure_drops_that_balance_only(engine: Engine,
                                                    new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    change(engine, fan, 8)
    provider = Recording(failing={fan: 1}, permanent=True)
    clock = Clock()
    assert send_pending(engine, provider, now=clock) == SendReport(claimed=1, dropped=1)
    assert outbox(engine, fan) == []
    st = state(engine, fan)
    assert st["ultimo_error"] == "permanente: wallet down"
    assert st["intentos"] == 0
    clock.advance(3600)
    assert send_pending(engine, provider, now=clock) == SendReport()  # not retried
    change(engine, fan, 1)  # the next balance change tries again
    assert send_pending(engine, provider, now=clock).delivered == 1
    assert provider.delivered == [(fan, 9)]


def test_an_unexpected_provider_error_is_retried(engine: Engine,
                                                new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    change(engine, fan, 2)

    class Broken:
        def deliver(self, fan: FanPass, saldo: int) -> None:
            raise KeyError("bug")

    assert send_pending(engine, Broken(), now=Clock()).retrying == 1
    assert state(engine, fan)["ultimo_error"] == "KeyError: 'bug'"
    assert outbox(engine, fan) == [(fan, 2)]


def test_stopping_hands_back_the_rest_of_the_batch(engine: Engine,
                                                  new_fan: Callable[[], int]) -> None:
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
    engine: Engine, new_fan: Callable[[], int],
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
    worker = threading.Thread(target=lambda: reports.append(
        send_pending(engine, first, now=clock)))
    worker.start()
    try:
        assert inside.wait(30)
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert move_points(conn, fan, 5, Motivo.VENTA) == 15
        change(engine, other, 1)
        second = Recording()
        assert send_pending(engine, second, now=clock) == SendReport(claimed=1, delivered=1)
        assert second.delivered == [(other, 1)]
    finally:
        release.set()
        worker.join(30)
    assert reports == [SendReport(claimed=1, delivered=1)]
    assert first.delivered == [(fan, 10)]
    assert outbox(engine, fan) == [(fan, 15)]
    third = Recording()
    assert send_pending(engine, third, now=clock).delivered == 1
    assert third.delivered == [(fan, 15)]


def test_a_sale_does_not_wait_for_a_claim_transaction(engine: Engine,
                                                      new_fan: Callable[[], int]) -> None:
    """The sender's row locks are on wallet_pases only: a sale of a locked fan commits."""
    fan = new_fan()
    change(engine, fan, 1)
    send_pending(engine, Recording(failing={fan: 1}), now=Clock())  # creates its state row
    with engine.begin() as sender_conn:
        sender_conn.execute(select(wallet_pases).where(wallet_pases.c.fan_pk == fan)
                            .with_for_update())
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert move_points(conn, fan, 1, Motivo.VENTA) == 2


def test_an_expired_lease_goes_to_the_next_sender(engine: Engine,
                                                 new_fan: Callable[[], int]) -> None:
    """A run that overstays its lease loses the fan: its late outcome is not recorded."""
    fan = new_fan()
    change(engine, fan, 4)
    inside, release = threading.Event(), threading.Event()

    class Slow(Recording):
        def deliver(self, fan: FanPass, saldo: int) -> None:
            inside.set()
            assert release.wait(30)
            raise WalletDeliveryError("late failure")

    worker = threading.Thread(target=send_pending, args=(engine, Slow()),
                              kwargs={"now": Clock(), "lease": timedelta(seconds=60)})
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
    assert outbox(engine) == []


def test_concurrent_runs_never_deliver_a_fan_twice(engine: Engine,
                                                  new_fan: Callable[[], int]) -> None:
    fan_pks = [new_fan() for _ in range(40)]
    for i, fan in enumerate(fan_pks):
        change(engine, fan, i + 1)
        change(engine, fan, 100)
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
        (fan, i + 101) for i, fan in enumerate(fan_pks))
    assert {name for _, _, name in delivered} == {"a", "b"}
    assert outbox(engine) == []


# --- the background sender and the CLI --------------------------------------------------------

def _wait_for(condition: Callable[[], bool], deadline_seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_the_sender_thread_delivers_on_its_own(engine: Engine,
                                              new_fan: Callable[[], int]) -> None:
    fan = new_fan()
    sender = WalletSender(engine, LocalProvider(engine), interval=0.05)
    sender.start()
    try:
        change(engine, fan, 12)
        change(engine, fan, 1)
        assert _wait_for(lambda: (fan, 13, "local") in entregas(engine))
        assert _wait_for(lambda: outbox(engine) == [])
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


def test_cli_wallet_send(engine: Engine, db_url: str, new_fan: Callable[[], int],
                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
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


def test_cli_wallet_send_rejects_a_bad_provider(monkeypatch: pytest.MonkeyPatch,
                                                db_url: str) -> None:
    monkeypatch.setenv("LOYALTY_DATABASE_URL", db_url)
    monkeypatch.setenv("LOYALTY_WALLET_PROVIDER", "apple")
    with pytest.raises(SystemExit) as exc:
        main(["wallet", "send"])
    assert str(exc.value) == (
        "error: LOYALTY_WALLET_PROVIDER must be one of local, google, got 'apple'")


def test_cli_wallet_send_needs_a_migrated_database(
    create_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOYALTY_DATABASE_URL", create_database())
    monkeypatch.delenv("LOYALTY_WALLET_PROVIDER", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["wallet", "send"])
    assert str(exc.value) == (
        "error: the database is not migrated; run `loyalty migrate` first")
