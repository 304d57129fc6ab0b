"""The bare server of bench/floor.py (issue 25): the cashier's work and nothing else, the
floor the project's server is measured against. Not a benchmark by itself.

    .venv/bin/python bench/_bare_server.py --port 0 [--threads N] [--connections N]

(LOYALTY_DATABASE_URL: the database bench/_fullstack.py built.) It prints
`serving on 127.0.0.1:PORT` once it serves.

What it is, all of it the project's own code, imported:
- a synchronous `grpc.server` with a thread pool of `--threads` (default: a `loyalty
  serve` worker's, api/server.py ServerSettings.max_workers), no interceptor, no server
  options;
- the project's servicer (api/pos.py PosServicer: the generated stubs, the request parsers
  of api/requests.py, the use cases of services/pos/ with `points_for`, the response
  builders) for `ping`, `fan/resolve`, `tx` and `redeem`; every other method answers
  UNIMPLEMENTED (the base class of the generated stubs);
- the hot paths' one statement each (store/sale.py SALE and ORIGINAL, store/resolve.py
  RESOLVE, store/redeem.py REDEEM and CREDITED, store/fan_lookup.py), reached through
  store/autocommit.fetch_one on `--connections` psycopg connections (as many as the
  threads by default, as a worker's pool; `BarePool`, a queue: psycopg_pool is not a
  dependency) instead of SQLAlchemy's pool;
- API keys against a dict loaded once at start (the bench's 65 keys, looked up by
  services/backoffice/keys.authenticate): the key read from the `authorization` metadata
  and hashed as api/authentication.py does (domain/keys.py), the permission checked
  (domain/permissions.py), the caller handed to the servicer as the interceptor does
  (api/context.py);
- a failure answered as the real server answers it (api/failures.py: a status with
  ErrorInfo, the envelope metadata for the gateway), so an unknown key is the contract's
  401 `clave_invalida` through the gateway;
- grpc.health.v1 (the gateway's active health check asks it every 2 s).

Not in it: the rate limit, the cache TTL of keys and the per-address limit on failed key
checks, metrics, logs, request ids, connection ageing and SO_REUSEPORT, the supervisor
process.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, cast

import grpc
import psycopg
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from loyalty_grpc.api.call_metadata import metadata_value
from loyalty_grpc.api.context import reset_caller, set_caller
from loyalty_grpc.api.failures import abort, failure_of
from loyalty_grpc.api.interceptors import POS_SERVICE
from loyalty_grpc.api.pos import PosServicer
from loyalty_grpc.api.server import ServerSettings
from loyalty_grpc.domain import keys, permissions
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CodigoError, LoyaltyError
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.services.backoffice.keys import authenticate
from loyalty_grpc.store.folios import Folios

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import KEY, KEY_PREFIX, NKEYS

if TYPE_CHECKING:
    from sqlalchemy import Engine

# The methods the bare server serves (the cashier's hot paths and ping).
SERVED = ("Ping", "ResolveFan", "RegisterTx", "Redeem")
BENCH_KEYS = (KEY, *(f"{KEY_PREFIX}{i}" for i in range(10, 10 + NKEYS)))

Row = tuple[object, ...]


class _Pooled:
    """One checked-out connection, as store/autocommit.py uses SQLAlchemy's: its psycopg
    connection (`driver_connection`), `close()` (back to the pool), `invalidate()`."""

    def __init__(self, pool: BarePool, conn: psycopg.Connection[Row]) -> None:
        self._pool = pool
        self.driver_connection = conn

    def close(self) -> None:
        self._pool.give_back(self.driver_connection)

    def invalidate(self, _error: BaseException | None = None) -> None:
        self._pool.replace(self.driver_connection)


class BarePool:
    """`size` psycopg connections opened at start, in a queue; what the project's store
    asks of an Engine on its hot paths (store/autocommit.py: `raw_connection()` and, when
    the server went away, `pool._invalidate`) and nothing else: any other use of it as an
    Engine fails at once (AttributeError). A lost connection is closed and replaced by a
    new one (its call fails: 503 servicio_no_disponible, as on the real server).
    store/autocommit.py switches each connection to autocommit for its statement."""

    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._idle: queue.SimpleQueue[psycopg.Connection[Row]] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(self._connect())

    def _connect(self) -> psycopg.Connection[Row]:
        return psycopg.connect(self._url, autocommit=True)

    def raw_connection(self) -> _Pooled:
        return _Pooled(self, self._idle.get())

    def give_back(self, conn: psycopg.Connection[Row]) -> None:
        self._idle.put(conn)

    def replace(self, conn: psycopg.Connection[Row]) -> None:
        conn.close()
        self._idle.put(self._connect())

    @property
    def pool(self) -> BarePool:
        return self

    def _invalidate(self, pooled: _Pooled, error: BaseException | None = None) -> None:
        pooled.invalidate(error)

    def as_engine(self) -> Engine:
        return cast("Engine", self)


def load_keys(engine: Engine, texts: tuple[str, ...]) -> dict[bytes, Caller]:
    """Each key's caller by its hash (domain/keys.key_hash); every key must exist."""
    found: dict[bytes, Caller] = {}
    for text in texts:
        caller = authenticate(engine, text)
        if caller is None:
            raise SystemExit(f"error: a bench key (…{keys.suffix(text)}) is not in the database")
        found[keys.key_hash(text)] = caller
    return found


Behavior = Callable[[object, grpc.ServicerContext], object]


def keyed(operation: str, behavior: Behavior, callers: dict[bytes, Caller]) -> Behavior:
    """`behavior` (a PosServicer method) for callers whose key is in `callers`; any failure
    answered as the real server's edge answers it (api/failures.py)."""

    def call(request: object, context: grpc.ServicerContext) -> object:
        try:
            token = keys.bearer_token(metadata_value(context, "authorization"))
            caller = callers.get(keys.key_hash(token))
            if caller is None:
                raise LoyaltyError(CodigoError.CLAVE_INVALIDA, keys.CLAVE_DESCONOCIDA)
            permissions.check(operation, caller.permisos)
            reset = set_caller(caller)
            try:
                return behavior(request, context)
            finally:
                reset_caller(reset)
        except Exception as error:
            failure = failure_of(error, request, operation)
        return abort(context, failure, [])

    return call


def build(
    database_url: str, *, port: int, threads: int, connections: int
) -> tuple[grpc.Server, int]:
    engine = BarePool(database_url, connections).as_engine()
    callers = load_keys(engine, BENCH_KEYS)
    real = PosServicer(engine, Folios(engine))
    # The generated base class answers every method UNIMPLEMENTED (its stubs call the
    # methods abstract) … but these.
    servicer = pb_grpc.PosServiceServicer()  # type: ignore[abstract]
    for name in SERVED:
        setattr(servicer, name, keyed(name, getattr(real, name), callers))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bare"))
    pb_grpc.add_PosServiceServicer_to_server(servicer, server)
    checks = health.HealthServicer()
    for name in ("", POS_SERVICE):
        checks.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    return server, bound


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    # As a worker of `loyalty serve`: its gRPC threads, and a database pool as large.
    parser.add_argument("--threads", type=int, default=ServerSettings.max_workers)
    parser.add_argument("--connections", type=int, default=ServerSettings.max_workers)
    args = parser.parse_args(argv)
    url = os.environ.get("LOYALTY_DATABASE_URL", "")
    if not url:
        raise SystemExit("error: LOYALTY_DATABASE_URL is not set")
    server, port = build(url, port=args.port, threads=args.threads, connections=args.connections)
    server.start()
    print(f"serving on 127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
