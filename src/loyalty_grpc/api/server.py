"""Building and stopping the gRPC server. `build_server` is separate from serving so that
tests bind port 0 and talk to it over a real channel.

Stopping a worker of a shared port (`reuse_port`) without failing calls: grpc's
`server.stop()` turns away every call that reaches the server once it was called, as
CANCELLED (grpc core zombifies calls not yet handed to the application, and calls that
arrive during its graceful GOAWAY on a connection that is still open; grpc/grpc#41785), and
closing the listener resets the connections waiting in its accept queue. A client cannot
tell such a call from one the server ran, so neither a client nor Envoy may retry it. So a
worker first *hands over* (`hand_over`, given by the process that runs the server:
runtime/process/shared_port.py): it leaves the port's SO_REUSEPORT group (new connections
go to the other workers), its open connections leave by themselves (every connection gets
a graceful GOAWAY from grpc after `connection_age_seconds`, grpc.max_connection_age_ms,
and the calls racing that GOAWAY are still served), and only then does it stop, with no
client left to race the shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from functools import partial

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from sqlalchemy import Engine

from loyalty_grpc.api.backoffice import BackofficeServicer
from loyalty_grpc.api.failed_checks import DEFAULT_LIMIT, FailedChecks
from loyalty_grpc.api.interceptors import BACKOFFICE_SERVICE, POS_SERVICE, EdgeInterceptor
from loyalty_grpc.api.key_cache import DEFAULT_TTL_SECONDS, KeyCache
from loyalty_grpc.api.observability import ObservabilityInterceptor
from loyalty_grpc.api.pos import PosServicer
from loyalty_grpc.api.reflection import enable_reflection
from loyalty_grpc.api.server_defaults import DEFAULT_HOST, DEFAULT_PORT
from loyalty_grpc.domain.rate_limit import DEFAULT_CALLS_PER_MINUTE
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc, pos_service_pb2_grpc
from loyalty_grpc.services.backoffice.keys import authenticate
from loyalty_grpc.services.rate_limit import RateLimiter
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.folios import Folios
from loyalty_grpc.store.rate_limit import PgCounters

log = logging.getLogger(__name__)

MAX_METADATA_BYTES = 96 * 1024


@dataclass(frozen=True)
class ServerSettings:
    database_url: str
    admin_token: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # Worker threads; the database pool is sized to match (DESIGN.md §3b).
    max_workers: int = 16
    key_cache_seconds: float = DEFAULT_TTL_SECONDS
    # Key checks that fail, per client address and minute, before the address's calls with
    # a key not known to work are refused without a lookup (api/failed_checks.py; per
    # process); 0: no limit.
    failed_key_checks_per_minute: int = DEFAULT_LIMIT
    # Calls per API key in any 60 s, counted in PostgreSQL across every process and host
    # (services/rate_limit.py); 0 disables the limit and its RateLimit headers.
    rate_limit_per_minute: int = DEFAULT_CALLS_PER_MINUTE
    # Most calls of one key reserved per database round trip (0: automatic, see
    # services/rate_limit.py; 1: a round trip per call).
    rate_limit_batch: int = 0
    # After SIGTERM: health says NOT_SERVING for `drain_seconds` while calls are still
    # served (so a balancer can notice), then in-flight calls get `grace_seconds` to finish.
    drain_seconds: float = 0.0
    grace_seconds: float = 10.0
    # Share the port with other worker processes (SO_REUSEPORT; `loyalty up`/`serve`
    # workers only, after the parent checked the port is free). Off: a port in use fails.
    # On, the server also ages connections and hands over before it stops (module doc).
    reuse_port: bool = False
    # reuse_port only: grpc sends each client connection a graceful GOAWAY after about this
    # long (+-10 %); clients reconnect to whichever worker the kernel picks, so connections
    # spread again over the workers (also onto a restarted one), and a stopping worker has
    # shed all its connections within this time. Calls are never cut by it (no age grace
    # limit): a connection with calls running closes when they end.
    connection_age_seconds: float = 1.0
    # Mutual TLS on the port (all three, PEM file paths, or none: plain): the server's
    # certificate and key, and the CA a client's certificate must chain to (a client
    # without one is refused in the handshake).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None


@dataclass
class GrpcServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer
    engine: Engine
    settings: ServerSettings
    # The per-key call limiter (None: no limit); its batches are settled on stop.
    limiter: RateLimiter | None = None
    # Its per-call metrics are written out once more on stop (api/call_metrics.py).
    observability: ObservabilityInterceptor | None = None
    # reuse_port: called with the port before the server stops, returns once no client is
    # left to race the shutdown (module doc).
    hand_over: Callable[[int], None] | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.server.start()
        for name in ("", POS_SERVICE, BACKOFFICE_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "gRPC server listening on %s:%d%s",
            self.settings.host,
            self.port,
            " (mutual TLS)" if self.settings.tls_cert is not None else "",
        )

    def stop(self) -> None:
        """Graceful stop: NOT_SERVING, drain, hand over (reuse_port: see the module doc),
        let in-flight calls finish, settle the call limiter's batches, close the pool. Safe
        to call more than once and from a signal handler's thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if self.settings.drain_seconds > 0:
            threading.Event().wait(self.settings.drain_seconds)
        if self.settings.reuse_port and self.hand_over is not None:
            self.hand_over(self.port)
        self.server.stop(self.settings.grace_seconds).wait()
        if self.limiter is not None:
            self.limiter.close()  # give back the spare calls this process still holds
        if self.observability is not None:
            self.observability.metrics.flush()
        self.engine.dispose()
        log.info("gRPC server stopped")

    def wait(self) -> None:
        self.server.wait_for_termination()


def build_server(
    settings: ServerSettings,
    engine: Engine | None = None,
    *,
    hand_over: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> GrpcServer:
    """`clock`: the edge's clock (the key cache's TTL, the windows of failed key checks);
    tests pass one they can move forward."""
    engine = engine or make_engine(settings.database_url, pool_size=settings.max_workers)

    keys_cache = KeyCache(
        partial(authenticate, engine), ttl=settings.key_cache_seconds, clock=clock
    )
    failed_checks = (
        FailedChecks(settings.failed_key_checks_per_minute, clock=clock)
        if settings.failed_key_checks_per_minute > 0
        else None
    )
    limiter = (
        RateLimiter(
            PgCounters(engine),
            settings.rate_limit_per_minute,
            max_batch=settings.rate_limit_batch or None,
        )
        if settings.rate_limit_per_minute > 0
        else None
    )
    observability = ObservabilityInterceptor(engine)
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=settings.max_workers, thread_name_prefix="grpc-worker"
        ),
        # Observability first: it times, counts and logs every call whole, including the
        # ones the edge interceptor refuses (api/observability.py).
        interceptors=[
            observability,
            EdgeInterceptor(keys_cache, settings.admin_token, limiter, failed_checks),
        ],
        # Unless reuse_port, a port already in use fails loudly instead of being shared.
        options=[
            ("grpc.so_reuseport", int(settings.reuse_port)),
            # Accept as much metadata as Envoy lets through (60 KiB of request headers
            # plus what it adds); grpc's default refuses some calls from 8 KiB on.
            ("grpc.max_metadata_size", MAX_METADATA_BYTES),
            ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
            *_age_options(settings),
        ],
    )
    # The process's folios, next to its engine: a sale takes one (store/folios.py).
    pos_service_pb2_grpc.add_PosServiceServicer_to_server(
        PosServicer(engine, Folios(engine)), server
    )
    backoffice_service_pb2_grpc.add_BackofficeServiceServicer_to_server(
        BackofficeServicer(engine, on_keys_changed=keys_cache.clear), server
    )
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection([POS_SERVICE, BACKOFFICE_SERVICE, health.SERVICE_NAME], server)
    address = f"{settings.host}:{settings.port}"
    try:
        credentials = _credentials(settings)
        port = (
            server.add_insecure_port(address)
            if credentials is None
            else server.add_secure_port(address, credentials)
        )
    except RuntimeError as exc:  # grpcio's way of saying the bind failed
        raise OSError(f"cannot listen on {address}: is the port in use?") from exc
    return GrpcServer(
        server,
        port,
        health_servicer,
        engine,
        settings,
        limiter=limiter,
        observability=observability,
        hand_over=hand_over,
    )


def _credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """Mutual TLS when the settings name its files (read once, at start)."""
    if settings.tls_cert is None or settings.tls_key is None or settings.tls_ca is None:
        return None
    with (
        open(settings.tls_key, "rb") as key,
        open(settings.tls_cert, "rb") as cert,
        open(settings.tls_ca, "rb") as ca,
    ):
        return grpc.ssl_server_credentials(
            [(key.read(), cert.read())], root_certificates=ca.read(), require_client_auth=True
        )


def _age_options(settings: ServerSettings) -> list[tuple[str, int]]:
    if not settings.reuse_port or settings.connection_age_seconds <= 0:
        return []
    return [("grpc.max_connection_age_ms", max(1, round(settings.connection_age_seconds * 1000)))]
