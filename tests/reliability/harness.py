"""What every reliability test shares: the stack as an operator starts it, POS clients that
retry as docs/errors.md tells integrators to, a load of such clients, and the exact audit.

- `running_stack`: `loyalty up --workers 2` (a real process, with Envoy as its child) on a
  database loaded with `World`: fans with opening balances, one key with every permission,
  a promotion whose codes are `asignado` to those fans.
- `Client`: one POS terminal. A call that fails with a connection error or timeout, HTTP
  502/503/504, or 429 (after `Retry-After`) is sent again with the same body, backing off
  50 ms, 100 ms, ... at most 2 s, plus 0-50 % jitter, until a deadline; any other answer is
  final. Every attempt is written to a `Journal`.
- `Book`: what the clients sent and what the service acknowledged (200), with every reply
  checked against what was sent.
- `Load`: client threads sending sales and redemptions (each retried to an answer) until
  stopped.
- `audit`: the database against the book, exactly (see its doc).
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import psutil  # type: ignore[import-untyped]
from sqlalchemy import Engine, text

from loyalty_grpc.services.backoffice.fixtures import apply_fixture
from loyalty_grpc.store.db import make_engine
from loyalty_grpc.store.migrate import upgrade
from loyalty_grpc.store.uow import run_in_uow
from tests.e2e.processes import LOYALTY, READY_LINE, Running, loyalty_env
from tests.support import free_port

PROGRAM = "rel"
RATE = Decimal("0.1")  # the program's points per peso
KEY = "lp_vivo_ReliabilityCajaTodos000000001"
PERMISSIONS = ["fan:leer", "tx:escribir", "redeem:escribir", "codigos:escribir", "roster:leer"]
PROMO = "Rel Promo"
PUNTOS_CANJE = 25  # what redeeming one of the promotion's codes credits to its fan
ADMIN_TOKEN = "reliability-admin-token-0123456789"
# A restarted child logs `<name> restarted (pid M, restart K)` (runtime/process/supervision.py).
RESTARTED = " restarted (pid "
RETRYABLE = frozenset({502, 503, 504})


# ------------------------------------------------------------------------------ the data


@dataclass(frozen=True)
class World:
    """What the database holds before the first call."""

    fans: dict[str, int]  # Fan ID -> opening balance
    codes: dict[str, str]  # code (asignado) -> its fan's Fan ID

    @classmethod
    def make(cls, *, fans: int = 12, codes: int = 6000) -> World:
        fan_ids = [f"REL{i:02}" for i in range(1, fans + 1)]
        return cls(
            fans={fan_id: 1000 * i for i, fan_id in enumerate(fan_ids, 1)},
            codes={f"C-{i:05}": fan_ids[i % fans] for i in range(1, codes + 1)},
        )

    def document(self) -> str:
        return json.dumps(
            {
                "programas": [
                    {
                        "id": PROGRAM,
                        "nombre": "Club Reliability",
                        "tasa_puntos": str(RATE),
                        "qr_url": "https://rel.example/fan",
                        "claves": [
                            {"clave": KEY, "integracion": "Caja Todo", "permisos": PERMISSIONS}
                        ],
                        "fans": [
                            {
                                "id": fan_id,
                                "nombre": f"Fan {fan_id}",
                                "correo": f"{fan_id.lower()}@example.com",
                                "socio_desde": 2020,
                                "temporadas": 1,
                                "qr_token": f"qr{fan_id}",
                                "puntos": opening,
                            }
                            for fan_id, opening in self.fans.items()
                        ],
                        "promos": [
                            {
                                "nombre": PROMO,
                                "estado": "activa",
                                "vigencia_fin": "2099-12-31",
                                "puntos_canje": PUNTOS_CANJE,
                                "codigos": [
                                    {"codigo": code, "estado": "asignado", "fan": fan_id}
                                    for code, fan_id in self.codes.items()
                                ],
                            }
                        ],
                    }
                ]
            }
        )


@dataclass(frozen=True)
class Sale:
    id_externo: str
    fan: str
    cents: int

    @property
    def points(self) -> int:
        """floor(cents x rate / 100), exact (docs/sales.md)."""
        return int((self.cents * RATE / 100).to_integral_value(ROUND_FLOOR))

    def body(self) -> dict[str, object]:
        return {
            "id_externo": self.id_externo,
            "fan": self.fan,
            "importe": f"{self.cents // 100}.{self.cents % 100:02}",
            "terminal": "rel-1",
        }


# ----------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    """A running `loyalty up` and what the tests share about it."""

    up: Running
    work: Path
    data_dir: Path
    database_url: str
    http_port: int
    grpc_port: int
    metrics_port: int
    engine: Engine
    world: World
    book: Book
    _codes: collections.deque[str] = field(default_factory=collections.deque)
    _codes_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def envoy_retries(self) -> int:
        """Calls Envoy has retried to the server so far (its cluster's upstream_rq_retry;
        from 0 again after an Envoy restart)."""
        from loyalty_grpc.runtime.gateway.xds import WorkDir

        admin = WorkDir(self.data_dir / "envoy").admin()
        status, text = admin.get("/stats?filter=^cluster%5C.loyalty_grpc%5C.upstream_rq_retry$")
        assert status == 200, text
        name, _, value = text.strip().partition(": ")
        assert name == "cluster.loyalty_grpc.upstream_rq_retry", text
        return int(value)

    def take_codes(self, n: int) -> list[str]:
        """Codes no test has sent yet (fewer when the pool runs out)."""
        with self._codes_lock:
            return [self._codes.popleft() for _ in range(min(n, len(self._codes)))]

    # -- processes

    def _children(self) -> list[psutil.Process]:
        try:
            return list(psutil.Process(self.up.proc.pid).children())
        except psutil.NoSuchProcess:
            return []

    def workers(self) -> list[psutil.Process]:
        """The live gRPC worker processes."""
        return [
            child for child in self._children() if _is(child, "loyalty_grpc.runtime.process.worker")
        ]

    def envoy(self) -> psutil.Process:
        found = [child for child in self._children() if _is(child, "envoy")]
        assert len(found) == 1, f"envoy processes: {found}"
        return found[0]

    def restarts_logged(self) -> int:
        return sum(RESTARTED in line for line in self.up.lines)

    def wait_restarts(self, count: int, timeout: float = 30) -> float:
        """Wait until `count` restarts were logged in all; returns how long it took."""
        start = time.monotonic()
        while self.restarts_logged() < count:
            assert self.up.proc.poll() is None, "loyalty up exited:\n" + self.log_tail()
            assert time.monotonic() - start < timeout, (
                f"{count} restarts not logged after {timeout} s:\n" + self.log_tail()
            )
            time.sleep(0.02)
        return time.monotonic() - start

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.up.lines[-lines:])

    def status(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *LOYALTY,
                "status",
                "--data-dir",
                str(self.data_dir),
                "--target",
                f"127.0.0.1:{self.grpc_port}",
            ],
            env=loyalty_env(LOYALTY_DATABASE_URL=self.database_url),
            text=True,
            capture_output=True,
            timeout=90,
            check=False,
        )

    def restarts_metric(self) -> dict[str, float]:
        """`loyalty_process_restarts_total` by `process`, from /metrics."""
        page = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        return {
            kind: float(value)
            for kind, value in re.findall(
                r'^loyalty_process_restarts_total\{process="(\w+)"\} (\S+)$', page, re.MULTILINE
            )
        }


def _is(process: psutil.Process, what: str) -> bool:
    try:
        if what == "envoy":
            return bool(process.name() == "envoy")
        return what in " ".join(process.cmdline())
    except psutil.Error:  # exited: a zombie until its parent reaps it
        return False


def kill(process: psutil.Process) -> int:
    """SIGKILL, as the kernel's OOM killer or an operator's `kill -9` does."""
    os.kill(process.pid, signal.SIGKILL)
    return int(process.pid)


def kill_in_turn(
    stack: Stack,
    journal: Journal,
    kinds: list[str],
    *,
    apart: float = 2.0,
    answers_within: float = 15.0,
    until: Callable[[], bool] | None = None,
) -> dict[str, list[float]]:
    """SIGKILL a child of each kind in `kinds` ("worker": the oldest one, so the slots take
    turns; "envoy"), `apart` seconds apart, or until `until()` is true after a kill. After
    every kill a ping, retried as docs/errors.md says, must succeed within `answers_within` s,
    and the supervisor must log the restart before the next kill (which then hits a child
    that served, not a crash loop). Returns how long the stack took to answer after each
    kill, by kind."""
    answered: dict[str, list[float]] = collections.defaultdict(list)
    restarts = stack.restarts_logged()
    last_kill = time.monotonic() - apart
    for n, kind in enumerate(kinds, 1):
        time.sleep(max(0.0, last_kill + apart - time.monotonic()))
        target = (
            min(stack.workers(), key=lambda w: w.create_time())
            if kind == "worker"
            else stack.envoy()
        )
        last_kill = time.monotonic()
        pid = kill(target)
        with Client(stack.base_url, journal, Policy(deadline=answers_within)) as client:
            reply = client.ping()
        assert reply.status == 200, (
            f"no answer {answers_within} s after kill {n} ({kind} {pid}): {reply.last}"
        )
        answered[kind].append(time.monotonic() - last_kill)
        stack.wait_restarts(restarts + n, timeout=answers_within)
        assert any(
            f"(pid {pid}) killed by SIGKILL after serving" in line for line in stack.up.lines
        ), stack.log_tail()
        if until is not None and until():
            break
    return answered


@contextmanager
def running_stack(database_url: str, work: Path, world: World, **env: str) -> Iterator[Stack]:
    """`loyalty up --workers 2` on `database_url` (migrated and loaded with `world` first),
    with `env` added to its environment, stopped with SIGTERM at the end, which must end it
    cleanly."""
    upgrade(database_url)
    engine = make_engine(database_url, pool_size=1)
    try:
        run_in_uow(engine, apply_fixture, world.document())
    finally:
        engine.dispose()
    with stack_on(database_url, work, world, **env) as stack:
        yield stack


@contextmanager
def stack_on(database_url: str, work: Path, world: World, **env: str) -> Iterator[Stack]:
    """`running_stack` on a database that holds `world` already (restored from a backup:
    `loyalty up` migrates it, nothing is loaded)."""
    engine = make_engine(database_url, pool_size=2)
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    data_dir = work / "data"
    up = Running(
        [
            "up",
            "--workers",
            "2",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            str(metrics_port),
            "--data-dir",
            str(data_dir),
        ],
        work,
        loyalty_env(
            LOYALTY_DATABASE_URL=database_url,
            LOYALTY_ADMIN_TOKEN=ADMIN_TOKEN,
            LOYALTY_RATE_LIMIT_PER_MINUTE="1000000",
            **env,
        ),
    )
    stack = Stack(
        up,
        work,
        data_dir,
        database_url,
        http_port,
        grpc_port,
        metrics_port,
        engine,
        world,
        Book(world),
        collections.deque(world.codes),
    )
    try:
        up.wait_for(READY_LINE)
        yield stack
    finally:
        code = up.stop(signal.SIGTERM) if up.proc.poll() is None else up.proc.returncode
        engine.dispose()
    assert code == 0, f"loyalty up ended with {code}:\n" + stack.log_tail()


# ---------------------------------------------------------------------------- the client


@dataclass(frozen=True)
class Attempt:
    """One HTTP request and what came back."""

    path: str
    started: float  # time.monotonic()
    ended: float
    status: int | None  # None: no answer (connection error, timeout)
    codigo: str | None  # error.codigo of a failure envelope
    error: str | None  # the transport error, or what is wrong with the envelope
    body: Any = None  # the parsed JSON (else the start of the text)

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status in RETRYABLE or self.status == 429


class Journal:
    """Every attempt of every client of a test, in the order they ended."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []  # list.append is atomic

    def add(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)

    def between(self, start: float, end: float) -> list[Attempt]:
        """Attempts that were running at some moment in [start, end]."""
        return [a for a in self.attempts if a.ended >= start and a.started <= end]

    def summary(self) -> str:
        kinds = collections.Counter(
            "no answer"
            if a.status is None
            else f"{a.status} not the envelope"
            if a.error
            else "ok"
            if a.status == 200
            else f"{a.status} {a.codigo}"
            for a in self.attempts
        )
        worst = max((a.seconds for a in self.attempts), default=0.0)
        return f"{len(self.attempts)} attempts {dict(kinds)}, slowest {worst:.2f} s"


@dataclass(frozen=True)
class Policy:
    """The retry loop of docs/errors.md (Retrying calls)."""

    first: float = 0.05
    cap: float = 2.0
    jitter: float = 0.5
    deadline: float = 30.0  # seconds for the whole call, retries included
    timeout: float = 20.0  # per attempt: longer than Envoy's 15 s route timeout

    def delay(self, retry: int) -> float:
        return min(self.cap, self.first * 2.0**retry) * (1 + random.uniform(0, self.jitter))


@dataclass(frozen=True)
class Reply:
    """The final answer of a call, after its retries."""

    attempts: list[Attempt]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def status(self) -> int | None:
        return self.last.status

    @property
    def data(self) -> dict[str, Any]:
        assert self.status == 200, self.last
        data: dict[str, Any] = self.last.body["data"]
        return data


def envelope_problem(status: int, body: Any) -> str | None:
    """What is wrong with a response body as the contract's envelope; None if nothing."""
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        return "not the envelope"
    if body["ok"]:
        return (
            None
            if status == 200 and isinstance(body.get("data"), dict)
            else f"ok true with HTTP {status}"
        )
    error = body.get("error")
    if status < 400 or set(body) != {"ok", "error"} or not isinstance(error, dict):
        return "not the error envelope"
    if not all(isinstance(error.get(name), str) for name in ("codigo", "mensaje", "detalle")):
        return "error without codigo, mensaje and detalle"
    return None


class Client:
    """One POS terminal: its own keep-alive connection, retries as docs/errors.md says."""

    def __init__(
        self,
        base_url: str,
        journal: Journal,
        policy: Policy | None = None,
        key: str = KEY,
        abort: threading.Event | None = None,
    ) -> None:
        self.policy = policy or Policy()
        self.journal = journal
        # Set: stop retrying (the test failed, nobody waits for the answer).
        self.abort = abort or threading.Event()
        self._http = httpx.Client(
            base_url=base_url,
            timeout=self.policy.timeout,
            headers={"Authorization": f"Bearer {key}"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def send(
        self, path: str, content: bytes | None, headers: dict[str, str] | None = None
    ) -> tuple[Attempt, httpx.Response | None]:
        """One attempt, as it is (no retry)."""
        started = time.monotonic()
        try:
            response = self._http.post(path, content=content, headers=headers)
        except httpx.TransportError as exc:
            attempt = Attempt(path, started, time.monotonic(), None, None, repr(exc))
            self.journal.add(attempt)
            return attempt, None
        ended = time.monotonic()
        try:
            body = response.json()
        except ValueError:  # kept to say what came instead
            body = response.text[:300]
        problem = envelope_problem(response.status_code, body)
        if response.headers.get("content-type", "").split(";")[0] != "application/json":
            problem = f"Content-Type {response.headers.get('content-type')!r}"
        codigo = body["error"]["codigo"] if problem is None and not body["ok"] else None
        attempt = Attempt(path, started, ended, response.status_code, codigo, problem, body)
        self.journal.add(attempt)
        return attempt, response

    def call(self, path: str, body: dict[str, object] | None = None) -> Reply:
        """The call, retried with the same body until an answer that is final (or the
        deadline)."""
        content = None if body is None else json.dumps(body).encode()
        headers = None if body is None else {"Content-Type": "application/json"}
        deadline = time.monotonic() + self.policy.deadline
        attempts: list[Attempt] = []
        while True:
            attempt, response = self.send(path, content, headers)
            attempts.append(attempt)
            if not attempt.retryable:
                return Reply(attempts)
            if attempt.status == 429 and response is not None:
                pause = float(response.headers.get("retry-after", "1"))
            else:
                pause = self.policy.delay(len(attempts) - 1)
            if time.monotonic() + pause > deadline or self.abort.wait(pause):
                return Reply(attempts)

    def ping(self) -> Reply:
        return self.call("/api/v1/ping")


# ------------------------------------------------------------------------------ the book


class Book:
    """What was sent and what the service acknowledged, over every test of a stack."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._lock = threading.Lock()
        self.sent_sales: dict[str, Sale] = {}
        self.acked_sales: dict[str, Sale] = {}
        self.sent_codes: set[str] = set()
        self.acked_codes: set[str] = set()
        # Replies that are not acknowledgements (after retries): id_externo or code -> why.
        self.unacked: dict[str, str] = {}
        # How many 200 replies said duplicado false (the credit), and the folios answered.
        self.first_replies: collections.Counter[str] = collections.Counter()
        self.folios: dict[str, set[int]] = collections.defaultdict(set)
        # The `puntos_acreditados` every 200 reply carried (issue 23 §2): id_externo or code
        # -> the values answered (the audit wants one: what the ledger credited).
        self.acreditados: dict[str, set[int]] = collections.defaultdict(set)
        # Replies that contradict what was sent or the database's rules.
        self.problems: list[str] = []

    def sale(self, client: Client, sale: Sale) -> Reply:
        with self._lock:
            self.sent_sales[sale.id_externo] = sale
        reply = client.call("/api/v1/tx", sale.body())
        with self._lock:
            if reply.status != 200:
                self.unacked[sale.id_externo] = _why(reply)
                return reply
            data = reply.data
            self.acked_sales[sale.id_externo] = sale
            self.unacked.pop(sale.id_externo, None)
            self.folios[sale.id_externo].add(data["tx"])
            self.acreditados[sale.id_externo].add(data["puntos_acreditados"])
            if data["fan"]["id"] != sale.fan:
                self.problems.append(f"tx {sale.id_externo}: answered fan {data['fan']}")
            if not data["duplicado"]:
                self.first_replies[sale.id_externo] += 1
                if data["puntos_otorgados"] != sale.points:
                    self.problems.append(
                        f"tx {sale.id_externo}: {data['puntos_otorgados']} "
                        f"points answered, {sale.points} expected"
                    )
            elif data["puntos_otorgados"] != 0:
                self.problems.append(
                    f"tx {sale.id_externo}: a duplicate credited {data['puntos_otorgados']}"
                )
        return reply

    def redeem(self, client: Client, code: str) -> Reply:
        with self._lock:
            self.sent_codes.add(code)
        reply = client.call("/api/v1/redeem", {"codigo": code, "terminal": "rel-1"})
        with self._lock:
            if reply.status != 200:
                self.unacked[code] = _why(reply)
                return reply
            data = reply.data
            self.acked_codes.add(code)
            self.unacked.pop(code, None)
            self.acreditados[code].add(data["puntos_acreditados"])
            if data["codigo"] != code or data["estado"] != "canjeado":
                self.problems.append(f"redeem {code}: answered {data}")
            if not data["duplicado"]:
                self.first_replies[code] += 1
                if data["puntos_otorgados"] != PUNTOS_CANJE:
                    self.problems.append(f"redeem {code}: {data['puntos_otorgados']} points")
            elif data["puntos_otorgados"] != 0:
                self.problems.append(f"redeem {code}: a duplicate credited points")
        return reply


def _why(reply: Reply) -> str:
    last = reply.last
    return f"{len(reply.attempts)} attempts, last {last.status} {last.codigo or last.error}"


# ------------------------------------------------------------------------------ the load


class Load:
    """`clients` threads, each a `Client` sending sales (fresh `id_externo`s, random fans and
    amounts) and, `redeem_share` of the time while the stack's pool lasts, redemptions of fresh
    codes; every call retried to an answer (`policy`: the default retry loop). Use as a
    context manager around the faults."""

    def __init__(
        self,
        stack: Stack,
        journal: Journal,
        tag: str,
        *,
        clients: int = 8,
        redeem_share: float = 0.3,
        pause: float = 0.0,
        policy: Policy | None = None,
    ) -> None:
        self.stack = stack
        self.policy = policy or Policy()
        self.journal = journal
        self.tag = tag
        self.redeem_share = redeem_share
        self.pause = pause
        self.calls = 0
        self._stop = threading.Event()
        self._abort = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), name=f"{tag}-{n}") for n in range(clients)
        ]
        self._failures: list[BaseException] = []

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if exc is not None:
            self._abort.set()
        for thread in self._threads:
            thread.join(self.policy.deadline + self.policy.timeout + 10)
        assert not any(thread.is_alive() for thread in self._threads), "a client hangs"
        if exc is None and self._failures:
            raise self._failures[0]

    def _run(self, n: int) -> None:
        rng = random.Random(f"{self.tag}-{n}")
        fans = sorted(self.stack.world.fans)
        book = self.stack.book
        try:
            with Client(
                self.stack.base_url, self.journal, self.policy, abort=self._abort
            ) as client:
                count = 0
                while not self._stop.is_set():
                    codes = self.stack.take_codes(1) if rng.random() < self.redeem_share else []
                    if codes:
                        book.redeem(client, codes[0])
                    else:
                        count += 1
                        book.sale(
                            client,
                            Sale(
                                f"{self.tag}-{n}-{count}", rng.choice(fans), rng.randint(0, 500_000)
                            ),
                        )
                    self.calls += 1
                    if self.pause:
                        self._stop.wait(self.pause)
        except BaseException as exc:  # reported by __exit__
            self._failures.append(exc)


# ----------------------------------------------------------------------------- the audit


@dataclass(frozen=True)
class Audited:
    sales: int
    redemptions: int
    fans: int
    # Acknowledged sales and redemptions whose every 200 said `duplicado` (the answer of the
    # call that applied them was lost): the till showed their `puntos_acreditados`.
    first_seen_as_duplicates: int = 0

    def __str__(self) -> str:
        return (
            f"audit exact: {self.sales} sales, {self.redemptions} redemptions, {self.fans} fans"
            f" ({self.first_seen_as_duplicates} first seen as duplicates)"
        )


def audit(stack: Stack) -> Audited:
    """The database against the book, exactly:
    - every call got an answer that acknowledges it (clients retried to a 200);
    - no reply contradicted what was sent (fan, points, a duplicate crediting points);
    - every acknowledged reply's `puntos_acreditados`, first or duplicate, is what the ledger
      says the sale or redemption credited (the retried till shows the right points);
    - each acknowledged `id_externo` is one sale, with its fan, amount and points, and one
      ledger entry of those points (none for 0 points); there is no other sale;
    - each acknowledged code is `canjeado` with one `canje` ledger entry of the
      promotion's points for its fan; every other code is still `asignado`, uncredited;
    - the ledger holds nothing else but the opening balances;
    - per fan: balance = opening + acknowledged credits = sum of its ledger entries."""
    book, world = stack.book, stack.world
    problems = list(book.problems)
    problems += [f"not acknowledged: {what}: {why}" for what, why in book.unacked.items()]
    with stack.engine.connect() as conn:
        fans = {
            row.fan_id: row
            for row in conn.execute(
                text("SELECT pk, fan_id, puntos FROM fans WHERE programa_id = :p"), {"p": PROGRAM}
            )
        }
        by_pk = {row.pk: fan_id for fan_id, row in fans.items()}
        sales = conn.execute(
            text(
                "SELECT v.id, v.id_externo, v.modo, v.fan_pk, v.importe_centavos, v.puntos,"
                " (SELECT count(*) FROM movimientos m"
                "  WHERE m.programa_id = v.programa_id AND m.venta_id = v.id) AS entries,"
                " (SELECT coalesce(sum(m.puntos), 0) FROM movimientos m"
                "  WHERE m.programa_id = v.programa_id AND m.venta_id = v.id"
                "  AND m.motivo = 'venta' AND m.fan_pk = v.fan_pk) AS credited"
                " FROM ventas v WHERE v.programa_id = :p"
            ),
            {"p": PROGRAM},
        ).all()
        codes = conn.execute(
            text(
                "SELECT c.id, c.codigo, c.estado, c.fan_pk,"
                " (SELECT count(*) FROM movimientos m"
                "  WHERE m.programa_id = c.programa_id AND m.codigo_id = c.id) AS entries,"
                " (SELECT coalesce(sum(m.puntos), 0) FROM movimientos m"
                "  WHERE m.programa_id = c.programa_id AND m.codigo_id = c.id"
                "  AND m.motivo = 'canje' AND m.fan_pk = c.fan_pk) AS credited"
                " FROM codigos c WHERE c.programa_id = :p"
            ),
            {"p": PROGRAM},
        ).all()
        ledger = conn.execute(
            text(
                "SELECT m.fan_pk, m.motivo, count(*) AS n, sum(m.puntos) AS puntos"
                " FROM movimientos m"
                " JOIN fans f ON f.programa_id = m.programa_id AND f.pk = m.fan_pk"
                " WHERE f.programa_id = :p"
                " GROUP BY m.fan_pk, m.motivo"
            ),
            {"p": PROGRAM},
        ).all()

    seen: collections.Counter[str] = collections.Counter(row.id_externo for row in sales)
    expected = dict(world.fans)
    for row in sales:
        sale = book.acked_sales.get(row.id_externo)
        if sale is None:
            problems.append(f"sale {row.id_externo} (folio {row.id}) was never acknowledged")
            continue
        if (row.modo, by_pk.get(row.fan_pk), row.importe_centavos, row.puntos) != (
            "vivo",
            sale.fan,
            sale.cents,
            sale.points,
        ):
            problems.append(f"sale {row.id_externo}: stored {tuple(row)}, sent {sale}")
        # A sale of 0 points moves nothing: no ledger entry (store/ledger.py).
        if (row.entries, row.credited) != (int(sale.points > 0), sale.points):
            problems.append(
                f"sale {row.id_externo}: {row.entries} ledger entries crediting "
                f"{row.credited}, expected {sale.points} points"
            )
        if book.acreditados[row.id_externo] - {row.credited}:
            problems.append(
                f"sale {row.id_externo}: answered puntos_acreditados "
                f"{sorted(book.acreditados[row.id_externo])}, the ledger credited {row.credited}"
            )
        if book.folios[row.id_externo] - {row.id}:
            problems.append(
                f"sale {row.id_externo}: answered folios "
                f"{sorted(book.folios[row.id_externo])}, stored {row.id}"
            )
    for id_externo, sale in book.acked_sales.items():
        if seen[id_externo] != 1:
            problems.append(f"acknowledged sale {id_externo} stored {seen[id_externo]} times")
        expected[sale.fan] += sale.points
    for row in codes:
        acked = row.codigo in book.acked_codes
        fan = by_pk.get(row.fan_pk)
        if fan != world.codes.get(row.codigo):
            problems.append(f"code {row.codigo}: fan {fan}, was {world.codes.get(row.codigo)}")
        if acked and (row.estado, row.entries, row.credited) != ("canjeado", 1, PUNTOS_CANJE):
            problems.append(
                f"acknowledged code {row.codigo}: {row.estado}, {row.entries} "
                f"ledger entries crediting {row.credited}"
            )
        if acked and book.acreditados[row.codigo] - {row.credited}:
            problems.append(
                f"acknowledged code {row.codigo}: answered puntos_acreditados "
                f"{sorted(book.acreditados[row.codigo])}, the ledger credited {row.credited}"
            )
        if not acked and (row.estado, row.entries) != ("asignado", 0):
            problems.append(
                f"code {row.codigo} never acknowledged: {row.estado}, {row.entries} ledger entries"
            )
        if acked and fan is not None:
            expected[fan] += PUNTOS_CANJE
    if missing := book.acked_codes - {row.codigo for row in codes}:
        problems.append(f"acknowledged codes not in the database: {sorted(missing)[:5]}")
    ledger_sum: collections.Counter[str] = collections.Counter()
    for row in ledger:
        fan = by_pk[row.fan_pk]
        ledger_sum[fan] += row.puntos
        if row.motivo not in ("venta", "canje") and (row.motivo, row.n, row.puntos) != (
            "ajuste",
            1,
            world.fans[fan],
        ):
            problems.append(f"fan {fan}: unexpected ledger entries {tuple(row)}")
    for fan, opening in world.fans.items():
        balance = fans[fan].puntos
        if not balance == expected[fan] == ledger_sum[fan]:
            problems.append(
                f"fan {fan}: balance {balance}, opening {opening} + acknowledged "
                f"credits = {expected[fan]}, ledger sum {ledger_sum[fan]}"
            )
    assert not problems, f"audit: {len(problems)} problems:\n" + "\n".join(problems[:30])
    lost_first = [k for k in [*book.acked_sales, *book.acked_codes] if not book.first_replies[k]]
    return Audited(len(book.acked_sales), len(book.acked_codes), len(world.fans), len(lost_first))
