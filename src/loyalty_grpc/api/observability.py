"""What every loyalty.v1 RPC leaves behind: Prometheus metrics and one JSON log line.

`ObservabilityInterceptor` is the FIRST interceptor of the server (outside the edge
interceptor of api/interceptors.py), so it sees every call whole, rejected or not:

- the request id: the `x-request-id` metadata (Envoy makes one per HTTP request and the
  transcoder forwards it) when it looks like an id, else a new UUID (native gRPC callers);
  it goes back to the caller as trailing metadata `x-request-id` (for HTTP clients Envoy
  sets the response header itself: `always_set_request_id_in_response`);
- the outcome `codigo`: "ok", else the `google.rpc.ErrorInfo` reason the edge interceptor
  put in the status (`abort_with_status`: read back from the context's trailing metadata
  after the behaviour raised);
- `loyalty_requests_total{method,codigo}`, `loyalty_request_seconds{method}`,
  `loyalty_rate_limited_total{method}` (codigo demasiadas_llamadas), the in-flight gauge
  and the database pool gauges. Every series the domain knows of exists from the start, at
  0 (`start_at_zero`, when the interceptor is built): a counter that first appears at 1
  hides that increase from rate()/increase(), and an alert on it sees nothing until then.
  Known: each unary method of the loyalty.v1 services (the generated descriptors) with
  "ok" and each codigo of the error catalogue (domain/errors.py; for PosService methods
  all but the back-office-only ones); the rate limit per PosService method (the only
  service it applies to, api/interceptors.py). An outcome outside that (a gRPC code
  without ErrorInfo, e.g. "cancelled") appears when it first happens;
- one log line on the `loyalty_grpc.calls` logger with `fields` (runtime/logs.py prints
  them as JSON keys): request_id, method, codigo, grpc_code, duration_ms and, once the key
  is authenticated, programa, modo and clave_id (the key's numeric id). Never the key, a
  Fan ID, an e-mail, a request or response body, nor the error's `detalle` (it may quote
  the client's input).

The program and key come from api/context.py: the edge interceptor sets the caller inside
this interceptor's call, and `listen_for_caller` tells this interceptor about it.

Metrics live in prometheus_client's default registry; with PROMETHEUS_MULTIPROC_DIR set
(runtime/metrics.py `prepare`, several worker processes) they are written to files that the
parent's /metrics endpoint aggregates. Gauges therefore use `livesum` (summed over live
workers), and the pool series (`PoolState`, POOL_SERIES) are written there by a thread of
each worker every POOL_REFRESH_SECONDS (a gauge function cannot cross processes); in a
single process a collector reads them at scrape time, all from one reading of the pool.
Nothing but the in-flight gauge, the two call metrics and the log line costs anything per
call (the interceptor's handlers are built once per method); in a worker process those
metrics are counted per thread and written once a second (api/call_metrics.py).
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

import grpc
from google.rpc import error_details_pb2, status_pb2
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, QueuePool

from loyalty_grpc.api.call_metrics import CallMetrics, every
from loyalty_grpc.api.context import listen_for_caller, stop_listening
from loyalty_grpc.api.interceptors import POS_SERVICE
from loyalty_grpc.domain.caller import Caller
from loyalty_grpc.domain.errors import CATALOGO, CodigoError
from loyalty_grpc.gen.loyalty.v1 import backoffice_service_pb2, pos_service_pb2

if TYPE_CHECKING:  # grpc-stubs make it generic; the runtime class is not subscriptable
    Handler = grpc.RpcMethodHandler[object, object]

Behavior = Callable[[object, grpc.ServicerContext], object]

REQUEST_ID_KEY = "x-request-id"
OBSERVED_PREFIX = "/loyalty.v1."
CALLS_LOGGER = "loyalty_grpc.calls"
OK = "ok"
# An id we accept from the caller: Envoy's UUIDs and the usual trace-id shapes. Anything
# else (too long, other characters) is replaced by a fresh UUID.
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# gRPC codes that mean the server failed (WARNING lines), not the client.
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)

log = logging.getLogger(CALLS_LOGGER)

# Calls take ~0.5 ms (ping) to tens of ms (a batch redeem); Envoy's route timeout is 15 s.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
)

REQUESTS = Counter(
    "loyalty_requests",
    "RPCs answered, by method and outcome codigo "
    "('ok' on success, else the error catalogue's codigo).",
    ["method", "codigo"],
)
LATENCY = Histogram(
    "loyalty_request_seconds",
    "Time to answer an RPC, by method (seconds).",
    ["method"],
    buckets=LATENCY_BUCKETS,
)
RATE_LIMITED = Counter(
    "loyalty_rate_limited",
    "RPCs refused with demasiadas_llamadas (the per-key rate limit), by method.",
    ["method"],
)

_request_id: ContextVar[str | None] = ContextVar("loyalty_request_id", default=None)
# How often a worker process writes its pool's state into the pool gauges.
POOL_REFRESH_SECONDS = 1.0


def multiprocess_mode() -> bool:
    """True when prometheus_client writes to PROMETHEUS_MULTIPROC_DIR (worker processes)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def current_request_id() -> str | None:
    """The request id of the call this thread is serving (for other log lines)."""
    return _request_id.get()


def log_context() -> Mapping[str, object]:
    """Fields every log line written during a call carries (runtime/logs.py)."""
    request_id = _request_id.get()
    return {"request_id": request_id} if request_id is not None else {}


# ---------------------------------------------------------------- gauges


@dataclass(frozen=True)
class _Gauges:
    in_flight: Gauge


@cache
def _gauges() -> _Gauges:
    """Created on first use, not at import: an unlabelled metric picks its storage (memory
    or PROMETHEUS_MULTIPROC_DIR files) when it is created, and runtime/metrics.py `prepare`
    may set that directory after this module was imported."""
    return _Gauges(
        in_flight=Gauge(
            "loyalty_requests_in_flight",
            "RPCs being answered right now.",
            multiprocess_mode="livesum",  # summed over the live worker processes
        )
    )


@dataclass(frozen=True)
class PoolState:
    """One reading of a SQLAlchemy QueuePool, in numbers that are never negative.

    QueuePool's own `overflow()` is "connections opened" minus `pool_size` (from -size when
    none is open), negative until the pool has opened `pool_size` connections: not a number
    to alert on. Here, per pool: `connections` = `checked_out` + `idle` (the pool's entries:
    an entry invalidated after a lost connection counts until it reconnects at its next
    checkout) and `overflow_in_use` = the connections beyond `size` open now, in use or
    idle (QueuePool closes a connection that comes back to a pool already holding `size`
    idle ones)."""

    size: int  # pool_size: connections the pool keeps open once opened
    max_overflow: float  # connections it may open beyond `size` (math.inf: no limit)
    checked_out: int  # in use by a call or a task
    idle: int  # open, waiting in the pool

    @classmethod
    def of(cls, pool: QueuePool) -> PoolState:
        idle = pool.checkedin()
        # Read without the pool's locks: a connection that moves between the two reads
        # could make checkedout() -1 for a moment.
        checked_out = max(pool.checkedout(), 0)
        limit: int = pool._max_overflow  # no public accessor; -1 = no limit
        return cls(
            size=pool.size(),
            max_overflow=math.inf if limit < 0 else float(limit),
            checked_out=checked_out,
            idle=idle,
        )

    @property
    def connections(self) -> int:
        return self.checked_out + self.idle

    @property
    def overflow_in_use(self) -> int:
        return max(self.connections - self.size, 0)

    @property
    def saturated(self) -> int:
        """1 when every one of the pool's `size` connections is checked out, else 0."""
        return int(self.size > 0 and self.checked_out >= self.size)


# The pool series: (name, help, value of a reading). All are summed over the live worker
# processes (multiprocess mode "livesum": a worker that exited stops counting), so each is
# the total of the `loyalty serve`; `saturated_workers` sums a 0/1 per worker, so it counts
# workers, which the totals cannot show (one worker can be saturated while the sum of
# checked_out stays below the sum of the sizes).
POOL_SERIES: Final[tuple[tuple[str, str, Callable[[PoolState], float]], ...]] = (
    (
        "loyalty_db_pool_size",
        "Database connections the pools keep open once opened: their configured pool_size, "
        "summed over the worker processes.",
        lambda state: state.size,
    ),
    (
        "loyalty_db_pool_max_overflow",
        "Database connections the pools may open beyond their size (closed when returned), "
        "summed over the worker processes.",
        lambda state: state.max_overflow,
    ),
    (
        "loyalty_db_pool_connections",
        "Database connections the pools hold now (checked_out + idle), summed over the "
        "worker processes.",
        lambda state: state.connections,
    ),
    (
        "loyalty_db_pool_checked_out",
        "Database connections in use by a call or a task now, summed over the worker processes.",
        lambda state: state.checked_out,
    ),
    (
        "loyalty_db_pool_idle",
        "Open database connections waiting in the pools now, summed over the worker processes.",
        lambda state: state.idle,
    ),
    (
        "loyalty_db_pool_overflow_in_use",
        "Database connections open beyond the pool size now (0 while a pool holds at most "
        "its size), summed over the worker processes.",
        lambda state: state.overflow_in_use,
    ),
    (
        "loyalty_db_pool_saturated_workers",
        "Worker processes whose pool has all of its pool_size connections checked out now "
        "(the pool is as large as the worker's gRPC threads: all of them are on the "
        "database).",
        lambda state: state.saturated,
    ),
)


class _PoolCollector(Collector):
    """One process (no PROMETHEUS_MULTIPROC_DIR): the pool series read from one reading of
    the watched pool at each scrape, so they agree with each other."""

    def __init__(self) -> None:
        self.engine: Engine | None = None

    def describe(self) -> Iterator[Metric]:
        for name, help_text, _ in POOL_SERIES:
            yield GaugeMetricFamily(name, help_text)

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        if engine is None or not isinstance(engine.pool, QueuePool):
            return
        state = PoolState.of(engine.pool)
        for name, help_text, value in POOL_SERIES:
            yield GaugeMetricFamily(name, help_text, value=value(state))


@cache
def _pool_collector() -> _PoolCollector:
    collector = _PoolCollector()
    REGISTRY.register(collector)
    return collector


@cache
def _pool_gauges() -> tuple[tuple[Gauge, Callable[[PoolState], float]], ...]:
    """Worker processes (PROMETHEUS_MULTIPROC_DIR): the pool series as gauges in the
    worker's files, summed over the live workers by the parent's /metrics. Created on
    first use, like `_gauges`."""
    return tuple(
        (Gauge(name, help_text, multiprocess_mode="livesum"), value)
        for name, help_text, value in POOL_SERIES
    )


class PoolGauges:
    """The SQLAlchemy pool of the server's engine as the POOL_SERIES (the latest engine
    watched: tests build several servers in one process). Absent when the engine has no
    QueuePool (NullPool, StaticPool: nothing to count). Nothing per call: in one process
    they are read at scrape time; in a worker process a thread writes them every
    POOL_REFRESH_SECONDS (a scrape-time function cannot cross processes)."""

    def __init__(self, engine: Engine | None) -> None:
        self._engine = engine
        self._multiprocess = multiprocess_mode()
        if engine is None or not isinstance(engine.pool, QueuePool):
            return
        if not self._multiprocess:
            _pool_collector().engine = engine
            return
        self.refresh()
        every(POOL_REFRESH_SECONDS, self.refresh, "pool-gauges", "refresh the pool gauges")

    def state(self) -> PoolState | None:
        """The pool now (`engine.pool` each time: `Engine.dispose` replaces it)."""
        pool = self._engine.pool if self._engine is not None else None
        return PoolState.of(pool) if isinstance(pool, QueuePool) else None

    def refresh(self) -> None:
        """Write the pool's state into the gauges (multiprocess mode only; in one process
        they are read at scrape time)."""
        if not self._multiprocess:
            return
        state = self.state()
        if state is not None:
            for gauge, value in _pool_gauges():
                gauge.set(value(state))


# ---------------------------------------------------------------- the interceptor


@dataclass
class _Call:
    request_id: str
    method: str
    caller: Caller | None = None

    def caller_known(self, caller: Caller) -> None:
        self.caller = caller


class ObservabilityInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, engine: Engine | None = None) -> None:
        start_at_zero()
        self._pool = PoolGauges(engine)
        self.metrics = CallMetrics(
            _requests,
            _latency,
            _gauges().in_flight,
            LATENCY_BUCKETS,
            batched=multiprocess_mode(),
        )
        # grpc asks for every call's handler: ours are built once per method.
        self._handlers: dict[str, Handler | None] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        if method in self._handlers:
            return self._handlers[method]
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or not method.startswith(OBSERVED_PREFIX):
            return handler  # health, reflection, unknown methods: not ours, not kept
        observed = grpc.unary_unary_rpc_method_handler(
            self._observed(method.lstrip("/"), handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._handlers[method] = observed
        return observed

    def _observed(self, method: str, behavior: Behavior) -> Behavior:
        def observed(request: object, context: grpc.ServicerContext) -> object:
            call = _Call(request_id=request_id_of(context.invocation_metadata()), method=method)
            id_token = _request_id.set(call.request_id)
            listening = listen_for_caller(call.caller_known)
            self.metrics.started()
            start = time.perf_counter()
            failed = True
            try:
                response = behavior(request, context)
                failed = False
                return response
            finally:
                seconds = time.perf_counter() - start
                stop_listening(listening)
                # Observing must never change the answer: what fails here is logged.
                codigo, code = CodigoError.ERROR_INTERNO.value, grpc.StatusCode.UNKNOWN
                try:
                    # After an abort_with_status the status is in the context, not yet
                    # sent: the id joins the trailing metadata the edge interceptor set.
                    _add_trailing_metadata(context, REQUEST_ID_KEY, call.request_id)
                    codigo, code = outcome(context, failed=failed)
                except Exception:
                    log.exception("could not read the outcome of the call %s", method)
                try:
                    self.metrics.finished(method, codigo, seconds)
                    _record(call, codigo, code, seconds)
                except Exception:
                    log.exception("could not record the call %s", method)
                _request_id.reset(id_token)

        return observed


def request_id_of(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The caller's `x-request-id` when it looks like an id, else a new UUID."""
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY:
            text = value if isinstance(value, str) else value.decode("ascii", "replace")
            if _REQUEST_ID.fullmatch(text):
                return text
            break
    return str(uuid.uuid4())


def _add_trailing_metadata(context: grpc.ServicerContext, key: str, value: str) -> None:
    existing = tuple(context.trailing_metadata() or ())
    context.set_trailing_metadata((*existing, (key, value)))


def outcome(context: grpc.ServicerContext, *, failed: bool) -> tuple[str, grpc.StatusCode]:
    """(codigo, gRPC status code) of a finished call."""
    code: grpc.StatusCode | None = context.code()  # type: ignore[attr-defined]
    if not failed and code in (None, grpc.StatusCode.OK):
        return OK, grpc.StatusCode.OK
    if code is None or code == grpc.StatusCode.OK:
        # An exception nobody turned into a status: grpc answers UNKNOWN.
        return CodigoError.ERROR_INTERNO.value, grpc.StatusCode.UNKNOWN
    reason = error_reason(context.trailing_metadata())
    return reason or code.name.lower(), code


def error_reason(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The `google.rpc.ErrorInfo` reason in a status's trailing metadata, if any."""
    for key, value in metadata or ():
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return str(info.reason) or None
    return None


@cache
def _requests(method: str, codigo: str) -> Counter:
    """The counter child of (method, codigo), looked up once (labels() costs a lock)."""
    return REQUESTS.labels(method, codigo)


@cache
def _latency(method: str) -> Histogram:
    return LATENCY.labels(method)


@cache
def _rate_limited(method: str) -> Counter:
    return RATE_LIMITED.labels(method)


def known_methods() -> dict[str, str]:
    """The `method` label of every call this interceptor observes -> its service: each
    unary method of the loyalty.v1 services, from the generated descriptors."""
    methods: dict[str, str] = {}
    for proto_file in (pos_service_pb2.DESCRIPTOR, backoffice_service_pb2.DESCRIPTOR):
        for service in proto_file.services_by_name.values():
            for rpc in service.methods:
                method = f"{service.full_name}/{rpc.name}"
                unary = not (rpc.client_streaming or rpc.server_streaming)
                if unary and f"/{method}".startswith(OBSERVED_PREFIX):
                    methods[method] = service.full_name
    return methods


def known_outcomes(service: str) -> list[str]:
    """The `codigo` label a call of `service` can end with: "ok" or a catalogue codigo
    (PosService: not the back-office-only ones)."""
    return [
        OK,
        *(
            entrada.codigo.value
            for entrada in CATALOGO.values()
            if service != POS_SERVICE or not entrada.interno
        ),
    ]


@cache
def start_at_zero() -> None:
    """Create every series the domain knows of (module doc), at 0, once per process. In a
    worker process (PROMETHEUS_MULTIPROC_DIR) this writes them to its file, so /metrics
    shows them before the first call. It also fills the per-call lookups' caches."""
    for method, service in known_methods().items():
        _latency(method)
        for codigo in known_outcomes(service):
            _requests(method, codigo)
        if service == POS_SERVICE:
            _rate_limited(method)


def _record(call: _Call, codigo: str, code: grpc.StatusCode, seconds: float) -> None:
    """The call's log line (and the rate-limited count); the other metrics: CallMetrics."""
    if codigo == CodigoError.DEMASIADAS_LLAMADAS.value:
        _rate_limited(call.method).inc()
    fields: dict[str, object] = {
        "request_id": call.request_id,
        "method": call.method,
        "codigo": codigo,
        "grpc_code": code.name,
        "duration_ms": round(seconds * 1000, 3),
    }
    if call.caller is not None:
        fields.update(
            programa=call.caller.programa_id,
            modo=str(call.caller.modo),
            clave_id=call.caller.clave_id,
        )
    level = logging.WARNING if code in _SERVER_FAULTS else logging.INFO
    log.log(level, "%s %s %.1f ms", call.method, codigo, seconds * 1000, extra={"fields": fields})


__all__ = [
    "CALLS_LOGGER",
    "LATENCY",
    "POOL_SERIES",
    "RATE_LIMITED",
    "REQUESTS",
    "REQUEST_ID_KEY",
    "ObservabilityInterceptor",
    "PoolGauges",
    "PoolState",
    "current_request_id",
    "error_reason",
    "known_methods",
    "known_outcomes",
    "log_context",
    "multiprocess_mode",
    "outcome",
    "request_id_of",
    "start_at_zero",
]
