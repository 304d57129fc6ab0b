"""A raw HTTP/2 (h2c, prior knowledge) connection for attacks on the gateway: it records the
server's SETTINGS, windows, resets and GOAWAY, opens streams without finishing them, sends
bodies within the flow-control windows Envoy grants, and can advertise a window of 0 (a
client that never reads). Built on the frame helpers of tests/e2e/support.py; every wait is
bounded."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable

from tests.e2e.support import _PREFACE, _block, _frame

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 0x3, 0x4
DEFAULT_WINDOW = 65535
INTERNAL_ERROR = 0x2
MAX_FRAME = 16384
TIMEOUT = 10.0
"""Seconds any wait for Envoy lasts at most."""


class H2Connection:
    """One prior-knowledge HTTP/2 connection to Envoy's HTTP port on loopback."""

    def __init__(self, port: int, *, initial_window: int | None = None) -> None:
        """Connect, send the preface and our SETTINGS (`initial_window`: the window we grant
        each response stream; 0 = we never read), and wait for Envoy's SETTINGS."""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        ours = (
            b""
            if initial_window is None
            else struct.pack(">HI", INITIAL_WINDOW_SIZE, initial_window)
        )
        self.reads = initial_window != 0
        self.settings: dict[int, int] = {}
        self.settings_seen = False
        self.connection_window = DEFAULT_WINDOW  # what we may still send
        self.windows: dict[int, int] = {}
        self.initial_window = DEFAULT_WINDOW
        self.connection_updates = 0  # Envoy's WINDOW_UPDATE increments on stream 0
        self.resets: dict[int, int] = {}  # stream -> error code of Envoy's RST_STREAM
        self.headers: set[int] = set()  # streams Envoy answered
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.goaway: int | None = None  # error code of Envoy's GOAWAY
        self.closed = False
        self._buffer = b""
        self._next_stream = 1
        self.sock.sendall(_PREFACE + _frame(SETTINGS, 0, 0, ours))
        self.wait(lambda: self.settings_seen)
        assert self.settings_seen, "Envoy sent no SETTINGS"

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Connection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading

    def wait(self, done: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        """Read frames until `done()` (True), the connection closes or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if self.closed or left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
            self._buffer += chunk
            self._frames()
        return True

    def _frames(self) -> None:
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3])
            if len(self._buffer) < 9 + length:
                return
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9]) & 0x7FFFFFFF
            payload, self._buffer = self._buffer[9 : 9 + length], self._buffer[9 + length :]
            self._frame(kind, flags, stream, payload)

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[at : at + 6])
                if key == INITIAL_WINDOW_SIZE:
                    for open_stream in self.windows:
                        self.windows[open_stream] += value - self.initial_window
                    self.initial_window = value
                self.settings[key] = value
            self.settings_seen = True
            self._send(_frame(SETTINGS, ACK, 0, b""))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload) & 0x7FFFFFFF
            if stream == 0:
                self.connection_window += increment
                self.connection_updates += increment
            else:
                self.windows[stream] = self.windows.get(stream, self.initial_window) + increment
        elif kind == PING and not flags & ACK:
            self._send(_frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            self.resets[stream] = int.from_bytes(payload)
        elif kind == GOAWAY:
            self.goaway = int.from_bytes(payload[4:8])
        elif kind == HEADERS:
            self.headers.add(stream)
            if flags & END_STREAM:
                self.ended.add(stream)
        elif kind == DATA:
            self.bodies[stream] = self.bodies.get(stream, b"") + payload
            if flags & END_STREAM:
                self.ended.add(stream)
            if payload and self.reads:  # give the window back: the answer keeps coming
                size = struct.pack(">I", len(payload))
                self._send(
                    _frame(WINDOW_UPDATE, 0, 0, size) + _frame(WINDOW_UPDATE, 0, stream, size)
                )

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True

    # ------------------------------------------------------------------ writing

    def request(
        self,
        path: bytes,
        *,
        method: bytes = b"POST",
        headers: list[tuple[bytes, bytes]] | None = None,
        end: bool = False,
    ) -> int:
        """Open a stream (HEADERS; `end`: no body follows); its id."""
        stream, self._next_stream = self._next_stream, self._next_stream + 2
        fields = [
            (b":method", method),
            (b":scheme", b"http"),
            (b":authority", b"pos.example"),
            (b":path", path),
            *(headers or []),
        ]
        self.windows[stream] = self.initial_window
        flags = END_HEADERS | (END_STREAM if end else 0)
        self._send(_frame(HEADERS, flags, stream, _block(fields)))
        return stream

    def send(self, stream: int, data: bytes, *, end: bool = False) -> int:
        """Send `data` on `stream` as Envoy's windows allow (`end`: and end the stream); the
        bytes sent (fewer when the stream is reset, the connection closes or no window
        comes within TIMEOUT)."""
        sent = 0
        while sent < len(data):
            if not self.wait(
                lambda: (
                    stream in self.resets
                    or (self.connection_window > 0 and self.windows[stream] > 0)
                )
            ):
                return sent
            if stream in self.resets:
                return sent
            size = min(len(data) - sent, self.connection_window, self.windows[stream], MAX_FRAME)
            last = end and sent + size == len(data)
            self._send(_frame(DATA, END_STREAM if last else 0, stream, data[sent : sent + size]))
            self.connection_window -= size
            self.windows[stream] -= size
            sent += size
        if end and not data:
            self._send(_frame(DATA, END_STREAM, stream, b""))
        return sent

    def answer(self, stream: int) -> dict[str, object]:
        """The JSON body Envoy answered on `stream` (waits for its end)."""
        assert self.wait(lambda: stream in self.ended), (stream, self.resets, self.goaway)
        decoded: dict[str, object] = json.loads(self.bodies[stream])
        return decoded
