"""runtime/logs.py: the JSON line format, its PII guard for database errors, and
configure_logging's handler management."""

from __future__ import annotations

import json
import logging
import sys
import threading

import pytest
from sqlalchemy import exc as sa_exc

from loyalty_grpc.runtime import logs
from loyalty_grpc.runtime.logs import JsonFormatter, configure_logging, format_exception


def record(
    msg: str = "hola %s",
    args: tuple[object, ...] = ("mundo",),
    **extra: object,
) -> logging.LogRecord:
    rec = logging.LogRecord("loyalty_grpc.calls", logging.INFO, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_one_json_line_with_the_fixed_keys_first():
    line = JsonFormatter().format(record())
    assert "\n" not in line
    data = json.loads(line)
    assert list(data)[:5] == ["ts", "level", "logger", "msg", "pid"]
    assert data["msg"] == "hola mundo"
    assert data["level"] == "INFO"
    assert data["logger"] == "loyalty_grpc.calls"
    assert data["ts"].endswith("Z")
    assert len(data["ts"]) == len("2026-01-01T00:00:00.000Z")


def test_fields_and_context_become_keys_but_never_replace_the_fixed_ones():
    formatter = JsonFormatter(lambda: {"request_id": "ctx-1"})
    data = json.loads(
        formatter.format(
            record(
                fields={
                    "method": "loyalty.v1.PosService/Ping",
                    "duration_ms": 1.5,
                    "clave_id": 7,
                    "level": "FAKE",
                    "msg": "fake",
                }
            )
        )
    )
    assert data["request_id"] == "ctx-1"
    assert data["method"] == "loyalty.v1.PosService/Ping"
    assert data["duration_ms"] == 1.5
    assert data["clave_id"] == 7
    assert (data["level"], data["msg"]) == ("INFO", "hola mundo")


def test_other_record_attributes_are_not_written():
    data = json.loads(JsonFormatter().format(record(correo="ana@example.com", body="{...}")))
    assert "ana@example.com" not in json.dumps(data)
    assert "correo" not in data


def test_a_multiline_message_stays_one_line():
    line = JsonFormatter().format(record("a\nb", ()))
    assert "\n" not in line
    assert json.loads(line)["msg"] == "a\nb"


# Not on the lines that raise: a traceback shows those source lines.
STATEMENT = "INSERT INTO fans ... "
PARAMS = {"correo": "ana@example.com"}


def _raise_db_error() -> None:
    try:
        raise ValueError("Key (id)=(HAL0001) already exists")
    except ValueError as cause:
        raise sa_exc.IntegrityError(STATEMENT, PARAMS, cause) from cause


def test_database_errors_keep_the_stack_but_not_their_text():
    with pytest.raises(sa_exc.IntegrityError) as caught:
        _raise_db_error()
    text = format_exception(caught.value)
    assert "ana@example.com" not in text
    assert "INSERT INTO" not in text
    assert "_raise_db_error" in text  # the stack is there
    assert "sqlalchemy.exc.IntegrityError" in text
    # the cause is an ordinary exception: its text stays
    assert "already exists" in text


def test_exception_keys():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    data = json.loads(JsonFormatter().format(rec))
    assert data["exc_type"] == "RuntimeError"
    assert data["exc"].startswith("Traceback (most recent call last):")
    assert data["exc"].endswith("RuntimeError: boom")


def test_configure_logging_replaces_its_own_handler_and_respects_others():
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        root.handlers[:] = []
        configure_logging("info", "json")
        configure_logging("warning", "text")
        ours = [h for h in root.handlers if isinstance(h, logs._Handler)]
        assert len(ours) == 1
        assert len(root.handlers) == 1
        assert not isinstance(ours[0].formatter, JsonFormatter)
        assert root.level == logging.WARNING
        # Someone else's handler (a test runner's): left alone, only the level changes.
        other = logging.NullHandler()
        root.handlers[:] = [other]
        configure_logging("debug", "json")
        assert root.handlers == [other]
        assert root.level == logging.DEBUG
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def test_configure_logging_rejects_unknown_formats():
    with pytest.raises(ValueError, match="json, text"):
        configure_logging("info", "xml")


def test_the_timestamp_is_utc_with_milliseconds():
    assert logs._timestamp(0.0) == "1970-01-01T00:00:00.000Z"
    assert logs._timestamp(1_790_000_000.0625) == "2026-09-21T14:13:20.062Z"
    assert logs._timestamp(1_790_000_000.9999) == "2026-09-21T14:13:20.999Z"


def test_lines_written_from_many_threads_stay_whole(tmp_path):
    """The handler formats outside its lock: every line still arrives whole, one per
    record."""

    path = tmp_path / "log"
    with path.open("w") as stream:
        handler = logs._Handler(stream)
        handler.setFormatter(JsonFormatter())

        def write(thread: int) -> None:
            for i in range(300):
                handler.handle(record("línea %s", (f"{thread}-{i}",), fields={"x": "y" * 500}))

        threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    lines = path.read_text().splitlines()
    assert sorted(json.loads(line)["msg"] for line in lines) == sorted(
        f"línea {t}-{i}" for t in range(8) for i in range(300)
    )
