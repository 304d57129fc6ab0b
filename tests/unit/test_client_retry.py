"""The typed client's retry rules (client/retry.py, README "Retrying calls") on a fake
clock: which codes are retried, the back-off and its jitter, RetryInfo honoured, the
overall deadline, per-attempt deadlines, the same request each time; and how a failure
becomes LoyaltyCallError (client/errors.py)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from loyalty_grpc.client.errors import STATUS_DETAILS_KEY, LoyaltyCallError, call_error
from loyalty_grpc.client.retry import Clock, RetryPolicy, call_with_retries


class FakeError(grpc.RpcError, grpc.Call):
    """A failed call as grpc raises it: code, details, trailing metadata."""

    def __init__(
        self, code: grpc.StatusCode, reason: str | None = None, retry_after: int | None = None
    ) -> None:
        self._code = code
        details = []
        if reason is not None:
            info = any_pb2.Any()
            info.Pack(
                error_details_pb2.ErrorInfo(
                    reason=reason,
                    domain="loyalty.v1",
                    metadata={"mensaje": f"mensaje {reason}", "detalle": f"detalle {reason}"},
                )
            )
            details.append(info)
        if retry_after is not None:
            retry = any_pb2.Any()
            retry.Pack(
                error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=retry_after))
            )
            details.append(retry)
        status = status_pb2.Status(code=code.value[0], message="m", details=details)
        self._trailing = ((STATUS_DETAILS_KEY, status.SerializeToString()),) if details else ()

    def code(self):
        return self._code

    def details(self):
        return "texto de grpc"

    def trailing_metadata(self):
        return self._trailing

    def initial_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


class FakeClock:
    def __init__(self, draw: float = 0.0) -> None:
        self.t = 0.0
        self.slept: list[float] = []
        self._draw = draw

    def clock(self) -> Clock:
        return Clock(now=lambda: self.t, sleep=self.sleep, draw=lambda: self._draw)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


def run(
    failures: list[FakeError], policy: RetryPolicy | None = None, draw: float = 0.0
) -> tuple[object, list[float], list[float]]:
    """call_with_retries over attempts that raise `failures` in turn, then succeed."""
    fake = FakeClock(draw)
    timeouts: list[float] = []
    pending = list(failures)

    def attempt(timeout: float) -> str:
        timeouts.append(timeout)
        if pending:
            raise pending.pop(0)
        return "ok"

    try:
        result = call_with_retries(policy or RetryPolicy(), attempt, fake.clock())
    except LoyaltyCallError as error:
        return error, fake.slept, timeouts
    return result, fake.slept, timeouts


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ],
)
def test_retryable_codes_are_retried_with_exponential_backoff(code):
    result, slept, timeouts = run([FakeError(code)] * 7)
    assert result == "ok"
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert timeouts[0] == 20.0


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "importe_invalido"),
        (grpc.StatusCode.NOT_FOUND, "fan_no_encontrado"),
        (grpc.StatusCode.INTERNAL, "error_interno"),
        (grpc.StatusCode.PERMISSION_DENIED, "permiso_denegado"),
        (grpc.StatusCode.UNAUTHENTICATED, "clave_invalida"),
    ],
)
def test_other_errors_are_final(code, reason):
    error, slept, _ = run([FakeError(code, reason)])
    assert isinstance(error, LoyaltyCallError)
    assert (error.status, error.codigo, error.mensaje, error.detalle) == (
        code,
        reason,
        f"mensaje {reason}",
        f"detalle {reason}",
    )
    assert (error.attempts, slept) == (1, [])


def test_jitter_adds_up_to_half():
    _, slept, _ = run([FakeError(grpc.StatusCode.UNAVAILABLE)] * 2, draw=0.999)
    assert slept == pytest.approx([0.05 * 1.4995, 0.1 * 1.4995])


def test_retry_info_is_honoured():
    error = FakeError(grpc.StatusCode.RESOURCE_EXHAUSTED, "demasiadas_llamadas", retry_after=3)
    result, slept, _ = run([error])
    assert (result, slept) == ("ok", [3.0])


def test_gives_up_when_the_next_wait_passes_the_deadline():
    error = FakeError(grpc.StatusCode.RESOURCE_EXHAUSTED, "demasiadas_llamadas", retry_after=40)
    got, slept, _ = run([error])
    assert isinstance(got, LoyaltyCallError)
    assert (got.codigo, got.retry_after, got.attempts, slept) == ("demasiadas_llamadas", 40, 1, [])


def test_overall_deadline_bounds_the_retries_and_each_attempt():
    policy = RetryPolicy(deadline=5.0, call_timeout=20.0)
    got, slept, timeouts = run([FakeError(grpc.StatusCode.UNAVAILABLE)] * 100, policy)
    assert isinstance(got, LoyaltyCallError)
    assert got.codigo is None  # not answered by the server: no ErrorInfo
    assert got.detalle == "texto de grpc"
    assert sum(slept) < 5.0
    assert got.attempts == len(timeouts) == len(slept) + 1
    assert timeouts[0] == 5.0  # the first attempt's deadline is what is left
    assert all(t <= 5.0 for t in timeouts)


def test_no_deadline_means_no_retry():
    got, slept, _ = run([FakeError(grpc.StatusCode.UNAVAILABLE)], RetryPolicy(deadline=None))
    assert isinstance(got, LoyaltyCallError)
    assert slept == []


def test_call_error_of_a_bare_rpc_error():
    error = call_error(FakeError(grpc.StatusCode.UNAVAILABLE))
    assert (error.status, error.codigo, error.retry_after) == (
        grpc.StatusCode.UNAVAILABLE,
        None,
        None,
    )
