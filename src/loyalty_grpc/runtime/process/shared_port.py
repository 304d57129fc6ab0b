"""The shared gRPC port (SO_REUSEPORT) seen from a worker process: its TCP sockets on the
port are grpc's, found among its descriptors (/proc/self/fd). `hand_over` is what a
worker does before its server stops (api/server.py's module doc says why): leave the
port's SO_REUSEPORT group, then wait until its clients have moved to the other workers."""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

# grpc spreads each connection's max-age timer over +-10 % of connection_age_seconds.
CONNECTION_AGE_JITTER = 0.1
# After the last GOAWAY a hand-over may have caused, the time for clients to act on it.
HANDOVER_MARGIN = 0.5
HANDOVER_POLL = 0.05


def hand_over(port: int, connection_age_seconds: float) -> None:
    """Leave the shared port, then wait until no client connection is left (each gets
    its GOAWAY within connection_age_seconds + 10 %; a client closes it once its calls
    are done), at most until every one has had its GOAWAY for HANDOVER_MARGIN."""
    started = time.monotonic()
    if not leave_port(port):
        log.warning(
            "found no listening socket of port %d to leave: calls that reach "
            "this server while it stops can fail",
            port,
        )
    age = max(connection_age_seconds, 0.0)
    deadline = started + age * (1 + CONNECTION_AGE_JITTER) + HANDOVER_MARGIN
    remaining = connection_count(port)
    log.info(
        "left port %d (grpc may log 'Closing acceptor ... Invalid argument'); "
        "%d client connections to hand over",
        port,
        remaining,
    )
    while remaining and time.monotonic() < deadline:
        time.sleep(HANDOVER_POLL)
        remaining = connection_count(port)
    log.info(
        "handed over in %.1f s (%d connections still finishing their calls)",
        time.monotonic() - started,
        remaining,
    )


_FD_DIRS = ("/proc/self/fd", "/dev/fd")
# struct tcp_info (Linux): for a listening socket, tcpi_unacked (the u32 at byte 24) is
# the number of connections waiting in its accept queue.
_TCP_INFO_ACCEPT_QUEUE = 24
_ACCEPT_QUEUE_WAIT = 0.2


def _sockets_on_port(port: int) -> Iterator[socket.socket]:
    """This process's TCP sockets bound to `port`, each as a duplicate descriptor that is
    closed after use (the socket itself stays open)."""
    directory = next((d for d in _FD_DIRS if os.path.isdir(d)), None)
    if directory is None:
        return
    for name in os.listdir(directory):
        try:
            duplicate = os.dup(int(name))
        except (OSError, ValueError):  # closed since the listing (the listing's own fd)
            continue
        try:
            sock = socket.socket(fileno=duplicate)
        except OSError:  # not a socket
            os.close(duplicate)
            continue
        with sock:
            try:
                bound = sock.getsockname()
            except OSError:
                continue
            if (
                sock.family in (socket.AF_INET, socket.AF_INET6)
                and sock.type == socket.SOCK_STREAM
                and bound[1] == port
            ):
                yield sock


def _listening(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))


def _await_empty_accept_queue(sock: socket.socket) -> None:
    """Until grpc has accepted the connections the kernel queued on `sock` (bounded). A
    connection still queued when the socket leaves the port is reset, so this narrows that
    race to the instant between the check and the shutdown; on Linux,
    net.ipv4.tcp_migrate_req=1 closes it (the kernel moves those connections to another
    worker's queue)."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None:
        return
    deadline = time.monotonic() + _ACCEPT_QUEUE_WAIT
    while time.monotonic() < deadline:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_ACCEPT_QUEUE + 4)
        if len(info) < _TCP_INFO_ACCEPT_QUEUE + 4:
            return
        (queued,) = struct.unpack_from("I", info, _TCP_INFO_ACCEPT_QUEUE)
        if not queued:
            return
        time.sleep(0.001)


def leave_port(port: int) -> int:
    """Take this process's listening sockets on `port` out of the port (and so out of its
    SO_REUSEPORT group): the kernel gives new connections to the other workers only, while
    the connections this process accepted stay open and served. grpc's acceptor then sees
    accept() fail, logs "Closing acceptor. Failed accept4: Invalid argument" and accepts no
    more; `server.stop()` later closes the socket as usual. Returns how many it shut."""
    left = 0
    for sock in _sockets_on_port(port):
        if _listening(sock):
            _await_empty_accept_queue(sock)
            sock.shutdown(socket.SHUT_RDWR)
            left += 1
    return left


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:  # a listening socket, also one that left the port
        return False
    return True


def connection_count(port: int) -> int:
    """Client connections this process has open on `port`."""
    return sum(1 for sock in _sockets_on_port(port) if _connected(sock))


__all__ = ["connection_count", "hand_over", "leave_port"]
