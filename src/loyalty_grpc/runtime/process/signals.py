"""Turn SIGINT/SIGTERM into an event the main thread waits on."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def stop_event() -> threading.Event:
    """An event set by the first SIGINT or SIGTERM (call from the main thread)."""
    event = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return event
