"""Helpers shared by more than one test module (most of them for the tests that talk to real
servers)."""

from __future__ import annotations

import bisect
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import Engine, insert, select, text

from loyalty_grpc.api.backoffice_values import KEY_MODE
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.domain.rate_limit import WINDOW_SECONDS
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2 as bo
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc as bo_grpc
from loyalty_grpc.store.tables import fans, metadata

ADMIN_TOKEN = "integration-admin-token-0123456789"
"""The back-office token of the integration tests' `server` (tests/integration/conftest.py)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The google.rpc.ErrorInfo a failed call carries (fails the test when absent)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, f"no rich status on {error!r}"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


@dataclass
class Admin:
    """The back office over a real channel, with the admin token."""

    stub: bo_grpc.BackofficeServiceStub
    token: str

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def program(self, programa: str, nombre: str) -> None:
        self.stub.UpsertProgram(
            bo.UpsertProgramRequest(
                program=bo.Program(
                    id=programa, nombre=nombre, tasa_puntos="0.1", qr_url="https://x.example/fan"
                )
            ),
            metadata=self.md,
        )

    def key(
        self, programa: str, integracion: str, permisos: list[str], modo: str = "vivo"
    ) -> tuple[int, str]:
        response = self.stub.IssueKey(
            bo.IssueKeyRequest(
                programa=programa,
                integracion=integracion,
                modo=KEY_MODE.number(modo),
                permisos=permisos,
            ),
            metadata=self.md,
        )
        return response.key.id, response.clave

    def revoke(self, key_id: int) -> None:
        self.stub.RevokeKey(bo.RevokeKeyRequest(id=key_id), metadata=self.md)


def cli_ok(result: tuple[int, str, str]) -> str:
    """A `loyalty admin` run (exit code, stdout, stderr) that succeeded: its stdout."""
    code, out, err = result
    assert (code, err) == (0, ""), err
    return out


def cli_failed(result: tuple[int, str, str], codigo: str) -> str:
    """A `loyalty admin` run that failed the way every one must: exit 1, nothing on stdout,
    one line `error: <codigo>: <detalle>` on stderr (returned)."""
    code, out, err = result
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {codigo}: "), err
    return lines[0]


Dump = dict[str, list[tuple[Any, ...]]]


def snapshot(engine: Engine) -> Dump:
    """Every row of every table, all columns, in primary-key order: compare two of them to
    prove that something changed nothing."""
    with engine.connect() as conn:
        return {
            table.name: [
                tuple(row)
                for row in conn.execute(select(table).order_by(*table.primary_key.columns))
            ]
            for table in metadata.sorted_tables
        }


@contextmanager
def fails(engine: Engine, codigo: CodigoError, *in_detalle: str) -> Iterator[None]:
    """The block raises LoyaltyError(codigo), whose detalle contains each of `in_detalle`,
    and changes nothing in the database."""
    before = snapshot(engine)
    with pytest.raises(LoyaltyError) as err:
        yield
    assert err.value.codigo is codigo, err.value
    for part in in_detalle:
        assert part in err.value.detalle, err.value.detalle
    assert snapshot(engine) == before


def insert_fan(engine: Engine, programa: str, prefix: str, n: int) -> int:
    """A fan row straight into the table (`{prefix}{n:04d}`, unique e-mail and QR token);
    its primary key."""
    with engine.begin() as conn:
        return int(
            conn.execute(
                insert(fans)
                .values(
                    programa_id=programa,
                    fan_id=f"{prefix}{n:04d}",
                    nombre=f"Fan {n}",
                    correo=f"{prefix.lower()}{n}@example.com",
                    socio_desde=2020,
                    qr_token=f"{prefix.lower()}-q{n}",
                )
                .returning(fans.c.pk)
            ).scalar_one()
        )


def max_in_any_window(admitted: list[float]) -> int:
    """The most admitted calls in any half-open interval [a, a + 60): it is enough to
    start intervals at admitted calls."""
    best = 0
    for i, a in enumerate(admitted):
        best = max(best, bisect.bisect_left(admitted, a + WINDOW_SECONDS) - i)
    return best


def run_together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Start every call at once (a barrier), in threads; re-raise the first failure."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    return results


_LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock'"
)
# On Citus the rows are on the workers, and so are the sessions waiting for their locks
# (a delegated call runs there): the coordinator's count plus each worker's.
_LOCK_WAITERS_CITUS = (
    f"SELECT ({_LOCK_WAITERS}) + (SELECT coalesce(sum(CAST(result AS bigint)), 0) "
    f"FROM run_command_on_workers($${_LOCK_WAITERS}$$) WHERE success)"
)


def wait_for_lock_waiters(engine: Engine, count: int) -> None:
    """Until `count` sessions of this database wait on a lock (10 s at most); on a Citus
    coordinator, sessions of this database on any node of the cluster."""
    with engine.connect() as conn:
        citus = (
            conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first()
            is not None
        )
    query = text(_LOCK_WAITERS_CITUS if citus else _LOCK_WAITERS)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            waiting = conn.execute(query).scalar_one()
        if waiting >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"never saw {count} sessions waiting on a lock")
