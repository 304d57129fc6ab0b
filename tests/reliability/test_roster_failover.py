"""Issue 24 §1: a client following the roster feed across a failover misses no change and
does not take the whole roster again.

A primary and its synchronous standby (tests/reliability/postgres_servers.py); the service
knows both through the multi-host URL. A follower (roster_follower.py, over the HTTP API)
takes the snapshot and some changes; more changes are made that it has not read yet; the
primary is lost and the standby promoted (`pg_ctl promote`, the orchestrator's step); more
changes on the new primary. The follower then goes on with the cursor it holds:

- a clean stop of the primary (`pg_ctl stop -m fast`): it continues, with no new snapshot
  and no `cursor_invalido`, and its mirror equals the database, every fan and field;
- a SIGKILL of the primary (every process of its server at once): the same is required,
  since the cursor's record was committed on the standby before the follower got it
  (docs/roster.md "Cursors across a failover or a restore"). A refusal would be safe (a
  new snapshot) but is not what a synchronous standby should give, so it fails the test.

Bounded: each case starts its own pair and stack (about 20-40 s on 2 busy cores)."""

from __future__ import annotations

import pytest

from tests.reliability.harness import Journal, World, running_stack
from tests.reliability.postgres_servers import Pair, synchronous_pair
from tests.reliability.roster_follower import (
    Follower,
    change_roster,
    differences,
    retrying,
    truth,
)


def lose_primary(pair: Pair, how: str) -> None:
    if how == "clean":
        pair.primary.run("pg_ctl", "-D", str(pair.primary.pgdata), "-m", "fast", "-w", "stop")
    else:
        pair.primary.kill()
    pair.standby.run("pg_ctl", "-D", str(pair.standby.pgdata), "-w", "promote")


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_roster_follower_goes_on_across_a_failover(
    how: str, tmp_path_factory: pytest.TempPathFactory, journal: Journal
) -> None:
    with (
        synchronous_pair(tmp_path_factory.mktemp("ha")) as pair,
        running_stack(
            pair.url, tmp_path_factory.mktemp("rel"), World.make(fans=20, codes=10)
        ) as stack,
    ):
        follower = Follower(stack, journal)
        follower.sync()
        change_roster(stack, journal, "antes", rounds=4)
        follower.sync()
        assert differences(follower.mirror, truth(stack.engine)) == []
        # Changes the follower has not read when the primary goes.
        change_roster(stack, journal, "pendiente", rounds=3)
        cursor = follower.cursor
        lose_primary(pair, how)
        with pair.standby.connect("loyalty") as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        stack.engine.dispose()  # its connections died with the primary
        change_roster(stack, journal, "despues", rounds=4)
        follower.sync()  # a CursorRefusedError here fails the test
        assert follower.snapshots == 1, "the follower had to take the snapshot again"
        assert follower.cursor != cursor
        db = retrying(stack.engine, lambda: truth(stack.engine))
        assert len(db) == 20 + 11
        assert differences(follower.mirror, db) == []
        # And it keeps following on the new primary.
        change_roster(stack, journal, "final", rounds=2)
        follower.sync()
        assert differences(follower.mirror, truth(stack.engine)) == []
        print(
            f"\nroster across a failover ({how}): {follower.pages} pages, "
            f"{follower.snapshots} snapshot, {len(db)} fans; {journal.summary()}"
        )
