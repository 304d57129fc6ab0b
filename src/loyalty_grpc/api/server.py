"""Building and stopping the gRPC server. `build_server` is separate from serving so that
tests bind port 0 and talk to it over a real channel."""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy import Engine

from loyalty_grpc.api.backoffice import BackofficeServicer
from loyalty_grpc.api.interceptors import BACKOFFICE_SERVICE, POS_SERVICE, EdgeInterceptor
from loyalty_grpc.api.key_cache import KeyCache
from loyalty_grpc.api.observability import ObservabilityInterceptor
from loyalty_grpc.api.pos import PosServicer
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2_grpc, pos_service_pb2_grpc
from loyalty_grpc.services.keys import authenticate
from loyalty_grpc.services.rate_limit import RateLimiter
from loyalty_grpc.store.db import make_engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    database_url: str
    admin_token: str
    host: str = "127.0.0.1"
    port: int = 50051
    # Worker threads; the database pool is sized to match (DESIGN.md §3b).
    max_workers: int = 16
    key_cache_seconds: float = 5.0
    # Calls per API key in any 60 s, counted in PostgreSQL across every process and host
    # (services/rate_limit.py); 0 disables the limit and its RateLimit headers.
    rate_limit_per_minute: int = 600
    # After SIGTERM: health says NOT_SERVING for `drain_seconds` while calls are still
    # served (so a balancer can notice), then in-flight calls get `grace_seconds` to finish.
    drain_seconds: float = 0.0
    grace_seconds: float = 10.0
    # Share the port with other worker processes (SO_REUSEPORT; `loyalty up`/`serve`
    # workers only, after the parent checked the port is free). Off: a port in use fails.
    reuse_port: bool = False


@dataclass
class GrpcServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer
    engine: Engine
    settings: ServerSettings
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.server.start()
        for name in ("", POS_SERVICE, BACKOFFICE_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC server listening on %s:%d", self.settings.host, self.port)

    def stop(self) -> None:
        """Graceful stop: NOT_SERVING, drain, let in-flight calls finish, close the pool.
        Safe to call more than once and from a signal handler's thread."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if self.settings.drain_seconds > 0:
            threading.Event().wait(self.settings.drain_seconds)
        self.server.stop(self.settings.grace_seconds).wait()
        self.engine.dispose()
        log.info("gRPC server stopped")

    def wait(self) -> None:
        self.server.wait_for_termination()


def build_server(settings: ServerSettings, engine: Engine | None = None) -> GrpcServer:
    engine = engine or make_engine(settings.database_url, pool_size=settings.max_workers)

    def lookup(key: str) -> Caller | None:
        with engine.connect() as conn:
            return authenticate(conn, key)

    keys_cache = KeyCache(lookup, ttl=settings.key_cache_seconds)
    limiter = (RateLimiter(engine, settings.rate_limit_per_minute)
               if settings.rate_limit_per_minute > 0 else None)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.max_workers,
                                   thread_name_prefix="grpc-worker"),
        # Observability first: it times, counts and logs every call whole, including the
        # ones the edge interceptor refuses (api/observability.py).
        interceptors=[ObservabilityInterceptor(engine),
                      EdgeInterceptor(keys_cache, settings.admin_token, limiter)],
        # Unless reuse_port, a port already in use fails loudly instead of being shared.
        options=[("grpc.so_reuseport", int(settings.reuse_port))],
    )
    pos_service_pb2_grpc.add_PosServiceServicer_to_server(PosServicer(engine), server)
    backoffice_service_pb2_grpc.add_BackofficeServiceServicer_to_server(
        BackofficeServicer(engine, on_keys_changed=keys_cache.clear), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [POS_SERVICE, BACKOFFICE_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{settings.host}:{settings.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio's way of saying the bind failed
        raise OSError(f"cannot listen on {address}: is the port in use?") from exc
    return GrpcServer(server, port, health_servicer, engine, settings)
