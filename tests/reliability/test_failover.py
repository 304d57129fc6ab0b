"""Issue 24 §1: the PostgreSQL primary is lost (SIGKILL, with every process of its server)
in the middle of a load of 8 retrying POS clients, and its synchronous standby is promoted
(`pg_ctl promote`: the orchestrator's step, docs/deployment.md "High availability").

The service knows both servers only through LOYALTY_DATABASE_URL in libpq's multi-host form
with `target_session_attrs=read-write`. Meanwhile every answer is 200 or 503
`servicio_no_disponible` in the envelope; the load goes on against the promoted standby
without a restart; and the audit on it finds every acknowledged sale and redemption, each
once, balances equal to the ledger: with `synchronous_commit = on` and the standby named in
`synchronous_standby_names`, nothing the service acknowledged was only on the lost primary.
The time without service is printed, not asserted (the machine is shared).

Both servers are the embedded wheel's binaries on loopback, run as the owner of their data
directories (PostgreSQL refuses root); the session's PostgreSQL is never touched."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from tests.reliability.harness import Journal, Load, Stack, World, audit, running_stack
from tests.reliability.postgres_servers import Pair, synchronous_pair

BEFORE, AFTER = 3.0, 4.0  # seconds of load before the loss and after the promotion


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with synchronous_pair(tmp_path_factory.mktemp("ha")) as both:
        yield both


@pytest.fixture(scope="module")
def stack(pair: Pair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(pair.url, tmp_path_factory.mktemp("rel"), World.make()) as up:
        yield up


def test_failover_to_the_synchronous_standby_loses_nothing_acknowledged(
    stack: Stack, pair: Pair, journal: Journal
):
    with Load(stack, journal, "ha") as load:
        time.sleep(BEFORE)
        acked_before = sum(1 for a in journal.attempts if a.status == 200)
        lost = time.monotonic()
        pair.primary.kill()
        killed = time.monotonic()
        pair.standby.run("pg_ctl", "-D", str(pair.standby.pgdata), "-w", "promote")
        promoted = time.monotonic()
        time.sleep(AFTER)
    with pair.standby.connect("loyalty") as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
    attempts = journal.attempts
    wrong = [
        a
        for a in attempts
        if a.status != 200
        and (a.status, a.codigo, a.error) != (503, "servicio_no_disponible", None)
    ]
    assert not wrong, f"{len(wrong)} answers not 200 nor 503 servicio_no_disponible: {wrong[:5]}"
    assert acked_before, "no call was answered before the primary was lost"
    served_after = [a for a in attempts if a.status == 200 and a.started > promoted]
    assert served_after, "no call was answered on the promoted standby"
    assert stack.restarts_logged() == 0, "a worker or Envoy died:\n" + stack.log_tail()
    stack.engine.dispose()  # its connections died with the primary
    audited = audit(stack)  # on whichever server accepts writes: the promoted standby
    # Time without service: the longest stretch with no 200 ending in it, from the loss
    # on (includes the promotion, which an orchestrator would have made).
    ends = sorted(a.ended for a in attempts if a.status == 200)
    points = [max((end for end in ends if end <= lost), default=lost)]
    points += [end for end in ends if end > lost]
    gaps = [b - a for a, b in itertools.pairwise(points)]
    first_new = min(a.ended for a in attempts if a.status == 200 and a.started > killed)
    refused = [a for a in attempts if a.status == 503]
    print(
        f"\nfailover: longest stretch without a 200 {max(gaps):.3f} s; the first call sent"
        f" after the kill answered 200 {first_new - killed:.3f} s after it (pg_ctl promote -w"
        f" returned {promoted - killed:.3f} s after it); {len(refused)} calls answered 503"
        f" servicio_no_disponible; {load.calls} calls: {journal.summary()}; {audited}"
    )
