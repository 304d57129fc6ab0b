"""api/server.py's hand-over on a SO_REUSEPORT port, with plain sockets: a process that
leaves the port gets no new connection (the other listener gets them all) and keeps the
connections it already has. Linux only (SO_REUSEPORT balancing, /proc/self/fd)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from loyalty_grpc.runtime.process.shared_port import connection_count, leave_port
from tests.support import free_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

# The other worker: listens on the port too, accepts every connection, and when its stdin
# closes prints how many it accepted (those still queued included).
OTHER = """
import select, socket, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(64)
listener.setblocking(False)
accepted = []
print("ready", flush=True)
while True:
    readable, _, _ = select.select([listener, sys.stdin], [], [])
    try:
        while True:
            accepted.append(listener.accept()[0])
    except BlockingIOError:
        pass
    if sys.stdin in readable and not sys.stdin.read():
        break
print(len(accepted), flush=True)
"""


def _listener(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    return sock


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def other(port: int) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", OTHER, str(port)],
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        yield process
        process.kill()


def _connect_until_mine(
    mine: socket.socket, port: int
) -> tuple[socket.socket, socket.socket, list[socket.socket]]:
    """Connect until the kernel gives a connection to `mine`: (client, accepted, the
    clients that went to the other listener)."""
    mine.settimeout(0.2)
    elsewhere: list[socket.socket] = []
    for _ in range(200):
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            accepted, _ = mine.accept()
        except TimeoutError:
            elsewhere.append(client)
            continue
        return client, accepted, elsewhere
    raise AssertionError("the kernel never chose this process's listener")


def test_leaving_the_port_sends_new_connections_elsewhere_and_keeps_open_ones(
    port: int, other: subprocess.Popen[str]
):
    mine = _listener(port)
    client, accepted, elsewhere = _connect_until_mine(mine, port)
    try:
        assert connection_count(port) == 1
        assert leave_port(port) == 1
        assert leave_port(port) == 0  # nothing listening any more
        assert connection_count(port) == 1

        later = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
        with pytest.raises(OSError, match="Invalid argument"):
            mine.accept()  # left the port: it queues no connection any more
        # The connection accepted before still works both ways.
        client.sendall(b"ping")
        assert accepted.recv(4) == b"ping"
        accepted.sendall(b"pong")
        assert client.recv(4) == b"pong"

        assert other.stdin is not None
        assert other.stdout is not None
        other.stdin.close()
        assert int(other.stdout.readline()) == len(elsewhere) + len(later)
        for sock in later:
            sock.close()
    finally:
        for sock in (client, accepted, mine, *elsewhere):
            sock.close()
    assert connection_count(port) == 0


def test_leave_port_touches_no_other_port(port: int):
    mine = _listener(port)
    unrelated = _listener(free_port())
    try:
        assert leave_port(port) == 1
        assert unrelated.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert mine.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
    finally:
        mine.close()
        unrelated.close()
