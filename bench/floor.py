"""The project's server against a bare server doing the same work, side by side in one run:
the yardstick of issue 25 (a benchmark, not a test).

    .venv/bin/python bench/floor.py [--seconds 10] [--clients 1,8,32] [--rounds 2]
        [--ops ping,resolve-id,tx,redeem] [--fans 100000] [--codes 400000]
        [--gateway-threads N]

Quick (about a minute): `--seconds 2 --clients 8 --rounds 1 --fans 2000 --codes 4000`;
the defaults run 48 runs of 3 + 10 s, about 12 minutes with the data set's load.

One embedded PostgreSQL with the data set of bench/_fullstack.py (its `loyalty up
--workers 1` only applies the fixture and drains the wallet outbox: it gets no load), and
two servers, each behind its own `loyalty gateway run` (the real gateway folder: envoy.yaml,
both Lua filters, the transcoder):
- real: `loyalty serve --workers 1` (its supervisor and one worker), the rate limit raised
  so that it never refuses (LOYALTY_RATE_LIMIT_PER_MINUTE=1000000), metrics port off, as
  the reference benchmark (../shared/bench/tx_vs_pgbench.sh) runs it;
- bare: bench/_bare_server.py, the project's servicer, use cases and statements on a
  synchronous grpc.server with a worker's threads, keys in a dict, as many psycopg
  connections, and none of the edge's layers (see that file).

For each operation (wrk requests of bench/hot_paths.py OPS) and client count, `--rounds`
rounds, each running both servers one after the other (real first in odd rounds, bare
first in even ones), each run: a warm-up (3 s, at most `--seconds`), then `--seconds` of
wrk. Per run: calls/s, p99, the server's CPU per call (its processes only: not its Envoy,
not PostgreSQL), its Envoy's CPU per call, and voluntary context switches per call (every
thread of the server's processes). Then per operation and client count the medians over
rounds and the ratio real/bare of server CPU per call (the median of each round's ratio).
CPU per call is all the CPU the processes used during the run over its calls, so it
includes what they spend without calls (printed once as `idle`: health checks, timers, the
real server's supervisor), which weighs most at 1 client.

`redeem`: the real server redeems the first half of the `Canje` codes, the bare server the
second half, each code once, in order (wrk's threads take turns), so a
redemption finds its code `asignado`. Should a half run out (too few `--codes` for the
load), the codes are taken again from the start: those calls are still answered calls
(200, `duplicado: true`, the extra statement that reads what the code credited), counted
as calls like the others and shown in the `dup` column.

The yardstick checks itself: before the load, one call of each operation to each server
(both 200 with answers of the same shape) and an unknown key (both the same 401
`clave_invalida` envelope); after it, the ledger audit (per fan, balance = sum of the
ledger), the bare server's sales and redemptions found in the database, and no answer
other than 2xx from either server. Any of these failing makes the exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import (
    ADMIN_TOKEN,
    HZ,
    KEY,
    STARTUP_TIMEOUT,
    VENV_BIN,
    FullStack,
    WrkResult,
    _proc_table,
    children,
    comm,
    cores_line,
    cpu_ns,
    free_port,
    full_stack,
    run_wrk,
    wrk_threads,
)
from hot_paths import OPS, Op

BENCH = Path(__file__).parent
DEFAULT_OPS = ("ping", "resolve-id", "tx", "redeem")
WARMUP_SECONDS = 3.0
# The wrk requests this file changes (checked: a change in bench/hot_paths.py fails loudly).
TX_ID = '"id_externo":"w%d'
REDEEM_PICK = "math.random(1, {half})"


@dataclass
class Served:
    """One server behind its own gateway, and its share of the `Canje` codes."""

    name: str
    server: subprocess.Popen[bytes]
    gateway: subprocess.Popen[bytes]
    url: str
    # id_externo prefix of its sales (the bare server's are counted afterwards).
    tx_prefix: str
    # Its folder (logs, wrk scripts).
    work: Path
    # Its codes: C{first}…C{first + count - 1}; `used`: taken so far (in order).
    first: int
    count: int
    used: int = 0
    # For the checks at the end, warm-ups included: `tx` answered 2xx, `redeem` answered
    # 2xx that redeemed (not `duplicado`), answers other than 2xx.
    sales: int = 0
    redeemed: int = 0
    non2xx: int = 0

    def server_pids(self) -> set[int]:
        return {self.server.pid, *children(self.server.pid)}

    def envoy_pids(self) -> set[int]:
        return {p for p in children(self.gateway.pid) if comm(p).startswith("envoy")}


@dataclass
class Sample:
    ticks_server: int
    ticks_envoy: int
    switches: int


def _switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def sample(served: Served) -> Sample:
    table = _proc_table()
    server, envoy = served.server_pids(), served.envoy_pids()
    return Sample(
        ticks_server=sum(table[p][2] for p in server if p in table),
        ticks_envoy=sum(table[p][2] for p in envoy if p in table),
        switches=sum(_switches(p) for p in server),
    )


@dataclass
class Run:
    rps: float
    p99_ms: float
    server_ms: float  # server CPU per call
    envoy_ms: float
    switches: float  # voluntary context switches per call
    duplicates: int = 0


@dataclass
class Cell:
    """One operation at one client count: the runs of each server, round by round."""

    runs: dict[str, list[Run]] = field(default_factory=lambda: {"real": [], "bare": []})


# ---------------------------------------------------------------- servers and gateways


def _env(stack: FullStack) -> dict[str, str]:
    return {
        **os.environ,
        "LOYALTY_DATABASE_URL": stack.database_url,
        "LOYALTY_ADMIN_TOKEN": ADMIN_TOKEN,
        "LOYALTY_RATE_LIMIT_PER_MINUTE": "1000000",
    }


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the process's group (it was started in a session of its own), then, after
    it exited or 30 s, SIGKILL to whatever is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def _wait_line(process: subprocess.Popen[bytes], log: Path, pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found is not None:
            return found
        if process.poll() is not None:
            raise SystemExit(f"error: {log.name} exited:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise SystemExit(f"error: no {pattern!r} in {log} in time")


UNKNOWN_KEY = "lp_vivo_" + "Z" * 32


def _wait_answer(url: str, processes: dict[Path, subprocess.Popen[bytes]]) -> None:
    """Until a ping with an unknown key gets the server's 401 through the gateway (a 503 is
    the gateway without a server yet)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        for log, process in processes.items():
            if process.poll() is not None:
                raise SystemExit(f"error: {log} exited:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError, ValueError):
            if _call(url, "/api/v1/ping", None, UNKNOWN_KEY)[0] == 401:
                return
        time.sleep(0.3)
    raise SystemExit(f"error: no answer from {url} in time; see {', '.join(map(str, processes))}")


def start_bare_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """bench/_bare_server.py on a free port (output to `log`): the process and its port."""
    command = [sys.executable, str(BENCH / "_bare_server.py"), "--port", "0"]
    server = _spawn(command, env, log)
    return server, int(_wait_line(server, log, r"serving on 127\.0\.0\.1:(\d+)").group(1))


def start_gateway(
    env: dict[str, str],
    log: Path,
    work_dir: Path,
    *,
    upstream_port: int,
    gateway_threads: int | None,
    gateway_dir: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """`loyalty gateway run` (the real gateway folder, or `gateway_dir`) on a free loopback
    port in front of the server on `upstream_port`, output to `log`: the process and its
    URL (not waited for: see _wait_answer)."""
    http_port = free_port()
    command = [
        str(VENV_BIN / "loyalty"),
        "gateway",
        "run",
        "--http-host",
        "127.0.0.1",
        "--http-port",
        str(http_port),
        "--upstream",
        f"127.0.0.1:{upstream_port}",
        "--work-dir",
        str(work_dir),
    ]
    if gateway_threads is not None:
        command += ["--gateway-threads", str(gateway_threads)]
    if gateway_dir is not None:
        command += ["--gateway-dir", str(gateway_dir)]
    return _spawn(command, env, log), f"http://127.0.0.1:{http_port}"


@contextlib.contextmanager
def served(
    stack: FullStack,
    name: str,
    *,
    tx_prefix: str,
    first: int,
    count: int,
    gateway_threads: int | None,
) -> Iterator[Served]:
    """The server `name` (real or bare) on a free port and its gateway in front of it."""
    work = stack.work / name
    work.mkdir()
    env = _env(stack)
    log = work / "server.log"
    if name == "real":
        port = free_port()
        command = [
            str(VENV_BIN / "loyalty"),
            "serve",
            "--workers",
            "1",
            "--grpc-host",
            "127.0.0.1",
            "--grpc-port",
            str(port),
            "--metrics-port",
            "0",
            "--data-dir",
            str(work / "data"),
        ]
        server = _spawn(command, env, log)
    else:
        server, port = start_bare_server(env, log)
    gateway: subprocess.Popen[bytes] | None = None
    try:
        gateway_log = work / "gateway.log"
        gateway, url = start_gateway(
            env, gateway_log, work / "envoy", upstream_port=port, gateway_threads=gateway_threads
        )
        _wait_answer(url, {log: server, gateway_log: gateway})
        running = Served(name, server, gateway, url, tx_prefix, work, first, count)
        print(
            f"{name}: {url}; measured as the server: "
            + ", ".join(f"{comm(p)} {p}" for p in sorted(running.server_pids()))
            + "; as its Envoy: "
            + ", ".join(f"{comm(p)} {p}" for p in sorted(running.envoy_pids()))
            + f"; logs in {work} (while it runs)",
            flush=True,
        )
        yield running
    finally:
        if gateway is not None:
            _stop(gateway)
        _stop(server)


# ---------------------------------------------------------------- the answers' check


def _call(url: str, path: str, body: dict[str, str] | None, key: str) -> tuple[int, object]:
    data = b"" if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _shape(value: object) -> object:
    """The JSON value's structure: the keys of objects, the types of the rest."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__


def check_answers(servers: list[Served]) -> list[str]:
    """One call of each operation to each server: both must answer 200 with answers of the
    same shape, and an unknown key the same 401 envelope. The problems found."""
    problems: list[str] = []
    calls: dict[str, tuple[str, dict[str, str] | None, str]] = {
        "ping": ("/api/v1/ping", None, KEY),
        "resolve": ("/api/v1/fan/resolve", {"fan": "F000001"}, KEY),
        "unknown key": ("/api/v1/ping", None, UNKNOWN_KEY),
    }
    answers: dict[str, list[tuple[int, object]]] = {}
    for name, (path, body, key) in calls.items():
        answers[name] = [_call(s.url, path, body, key) for s in servers]
    for s in servers:
        answers.setdefault("tx", []).append(
            _call(
                s.url,
                "/api/v1/tx",
                {"id_externo": f"{s.tx_prefix}check", "fan": "F000002", "importe": "100.00"},
                KEY,
            )
        )
        answers.setdefault("redeem", []).append(
            _call(s.url, "/api/v1/redeem", {"codigo": f"C{s.first + s.used:08d}"}, KEY)
        )
        s.used += 1
        s.sales += 1
        s.redeemed += 1
    for name, pair in answers.items():
        (real_status, real_body), (bare_status, bare_body) = pair
        want = 401 if name == "unknown key" else 200
        if real_status != want or bare_status != want:
            problems.append(
                f"{name}: real {real_status} {real_body}, bare {bare_status} {bare_body}"
            )
        elif name == "unknown key" and real_body != bare_body:
            problems.append(f"{name}: real {real_body}, bare {bare_body}")
        elif _shape(real_body) != _shape(bare_body):
            problems.append(f"{name}: shapes differ: real {real_body}, bare {bare_body}")
    return problems


# ---------------------------------------------------------------- wrk


# `redeem`: each wrk thread takes every `stride`-th code of the server's half from `offset`
# on, wrapping around; done() prints the most codes one thread took and the duplicates.
REDEEM_EPILOGUE = """
function next_code()
  counter = counter + 1
  return {first} + ({offset} + (counter - 1) * {stride} + tid - 1) % {count}
end
redeem_threads = {{}}
local redeem_setup = setup
function setup(thread)
  redeem_setup(thread)
  table.insert(redeem_threads, thread)
end
local redeem_check = response
function response(status, headers, body)
  if status == 200 and string.find(body, '"duplicado":true', 1, true) then
    dups = (dups or 0) + 1
  end
  redeem_check(status, headers, body)
end
function done(summary, latency, requests)
  local most, total = 0, 0
  for _, t in ipairs(redeem_threads) do
    most = math.max(most, t:get("counter") or 0)
    total = total + (t:get("dups") or 0)
  end
  io.write("REDEEMED " .. most .. " " .. total .. "\\n")
end
"""


def _replaced(text: str, old: str, new: str) -> str:
    if old not in text:
        raise SystemExit(f"error: bench/hot_paths.py's wrk request no longer has {old!r}")
    return text.replace(old, new)


def wrk_run(op: Op, s: Served, *, clients: int, seconds: float, fans: int) -> WrkResult:
    """One wrk run of `op` against `s` (its sales and codes: see the module doc)."""
    script = op.wrk.replace("{fans}", str(fans))
    epilogue = ""
    if op.name == "tx":
        script = _replaced(script, TX_ID, f'"id_externo":"{s.tx_prefix}%d')
    if op.name == "redeem":
        script = _replaced(script, REDEEM_PICK, "next_code()")
        epilogue = REDEEM_EPILOGUE.format(
            first=s.first, offset=s.used, stride=wrk_threads(clients), count=s.count
        )
    result = run_wrk(
        s.url, script, clients=clients, seconds=seconds, work=s.work, epilogue=epilogue
    )
    answered = result.requests - result.non2xx
    s.non2xx += result.non2xx
    if op.name == "tx":
        s.sales += answered
    if op.name == "redeem":
        found = re.search(r"^REDEEMED (\d+) (\d+)$", result.output, re.MULTILINE)
        if found is None:
            raise SystemExit(f"error: no REDEEMED line in wrk's report:\n{result.output}")
        s.used += wrk_threads(clients) * int(found.group(1))
        result.statuses["duplicado"] = int(found.group(2))
        s.redeemed += answered - int(found.group(2))
    return result


def measure(op: Op, s: Served, *, clients: int, args: argparse.Namespace) -> Run:
    """A warm-up, then one measured run."""
    wrk_run(op, s, clients=clients, seconds=min(WARMUP_SECONDS, args.seconds), fans=args.fans)
    before = sample(s)
    result = wrk_run(op, s, clients=clients, seconds=args.seconds, fans=args.fans)
    after = sample(s)
    calls = max(result.requests, 1)
    run = Run(
        rps=result.rps,
        p99_ms=result.p99_ms,
        server_ms=1000 * (after.ticks_server - before.ticks_server) / HZ / calls,
        envoy_ms=1000 * (after.ticks_envoy - before.ticks_envoy) / HZ / calls,
        switches=(after.switches - before.switches) / calls,
        duplicates=result.statuses.get("duplicado", 0),
    )
    print(
        f"{op.name:10} c={clients:<3} {s.name:4} {run.rps:7.0f}/s  p99 {run.p99_ms:6.2f} ms  "
        f"CPU ms/call server {run.server_ms:.3f} envoy {run.envoy_ms:.3f}  "
        f"vcsw/call {run.switches:5.1f}  non2xx {result.non2xx}"
        + (f"  dup {run.duplicates}" if op.name == "redeem" else ""),
        flush=True,
    )
    if result.errors:
        print("    " + result.errors.replace("\n", "\n    "), flush=True)
    return run


IDLE_SECONDS = 3.0


def idle_cost(servers: list[Served]) -> str:
    """What each server and its Envoy spend without calls (health checks, timers, the
    supervisor), in ms of CPU per second: folded into every run's CPU per call, it weighs
    most where calls are few (1 client)."""

    # (Nanoseconds of the threads alive, /proc/PID/task/*/schedstat: clock ticks are too
    # coarse for so little.)
    def ns(s: Served) -> tuple[int, int]:
        return sum(map(cpu_ns, s.server_pids())), sum(map(cpu_ns, s.envoy_pids()))

    before = [ns(s) for s in servers]
    time.sleep(IDLE_SECONDS)
    after = [ns(s) for s in servers]
    parts = [
        f"{s.name} server {(a[0] - b[0]) / 1e6 / IDLE_SECONDS:.2f} "
        f"envoy {(a[1] - b[1]) / 1e6 / IDLE_SECONDS:.2f}"
        for s, b, a in zip(servers, before, after, strict=True)
    ]
    return f"idle, CPU ms per second ({IDLE_SECONDS:g} s without calls): " + "; ".join(parts)


# ---------------------------------------------------------------- the table and the checks


def table(cells: dict[tuple[str, int], Cell]) -> str:
    """Medians over rounds per operation and client count, and real/bare."""
    lines = [
        f"{'':16}|{'real (loyalty serve --workers 1)':^38}|{'bare (bench/_bare_server.py)':^38}|",
        f"{'op':10} {'c':>4} |"
        + f" {'calls/s':>7} {'p99 ms':>7} {'cpu ms':>7} {'envoy':>6} {'vcsw':>5} |" * 2
        + " real/bare cpu",
    ]
    for (op, clients), cell in cells.items():
        row = f"{op:10} {clients:>4} |"
        for name in ("real", "bare"):
            runs = cell.runs[name]

            def med(values: list[float]) -> float:
                return statistics.median(values)

            row += (
                f" {med([r.rps for r in runs]):7.0f} {med([r.p99_ms for r in runs]):7.2f}"
                f" {med([r.server_ms for r in runs]):7.3f} {med([r.envoy_ms for r in runs]):6.3f}"
                f" {med([r.switches for r in runs]):5.1f} |"
            )
        ratios = [
            real.server_ms / bare.server_ms
            for real, bare in zip(cell.runs["real"], cell.runs["bare"], strict=True)
            if bare.server_ms > 0
        ]
        row += f" {statistics.median(ratios):5.2f}" if ratios else "   n/a"
        lines.append(row)
    return "\n".join(lines)


def final_checks(stack: FullStack, servers: list[Served]) -> list[str]:
    """The audit, the bare server's work in the database, no answer other than 2xx."""
    problems: list[str] = []
    audit = stack.audit()
    print(audit)
    if not audit.startswith("ledger audit: 0 fans"):
        problems.append(audit)
    for s in servers:
        if s.non2xx:
            problems.append(f"the {s.name} server answered {s.non2xx} calls with non-2xx")
    bare = next(s for s in servers if s.name == "bare")
    sales = int(
        stack.psql(f"SELECT count(*) FROM ventas WHERE id_externo LIKE '{bare.tx_prefix}%'")
    )
    last = bare.first + bare.count - 1
    redeemed = int(
        stack.psql(
            "SELECT count(*) FROM codigos WHERE estado = 'canjeado' AND codigo BETWEEN "
            f"'C{bare.first:08d}' AND 'C{last:08d}'"
        )
    )
    print(
        f"bare server: {sales:,} sales in ventas for {bare.sales:,} tx answered 200; "
        f"{redeemed:,} of its codes canjeado for {bare.redeemed:,} first redemptions answered",
        flush=True,
    )
    if sales < bare.sales:
        problems.append(f"the bare server answered {bare.sales} sales, ventas has {sales}")
    if redeemed < bare.redeemed:
        problems.append(f"the bare server answered {bare.redeemed} redemptions, {redeemed} done")
    return problems


def run(args: argparse.Namespace) -> int:
    by_name = {op.name: op for op in OPS}
    unknown = [name for name in args.ops if name not in by_name]
    if unknown:
        raise SystemExit(f"error: unknown operations {unknown} (known: {sorted(by_name)})")
    if args.codes < 4:
        raise SystemExit("error: --codes must be at least 4")
    print(cores_line(), flush=True)
    half = args.codes // 2
    problems: list[str] = []
    with (
        full_stack(fans=args.fans, codes=args.codes, workers=1) as stack,
        served(
            stack,
            "real",
            tx_prefix="real",
            first=1,
            count=half,
            gateway_threads=args.gateway_threads,
        ) as real,
        served(
            stack,
            "bare",
            tx_prefix="bare",
            first=half + 1,
            count=args.codes - half,
            gateway_threads=args.gateway_threads,
        ) as bare,
    ):
        servers = [real, bare]
        problems += check_answers(servers)
        if problems:
            print("\n".join(["the answers differ:", *problems]), flush=True)
            return 1
        print("answers: both servers answer each operation alike (shape, 401 envelope)")
        idle = idle_cost(servers)
        print(idle, flush=True)
        cells: dict[tuple[str, int], Cell] = {}
        for name in args.ops:
            op = by_name[name]
            for clients in args.clients:
                cell = cells.setdefault((name, clients), Cell())
                for round_ in range(args.rounds):
                    for s in servers if round_ % 2 == 0 else servers[::-1]:
                        stack.wait_outbox_empty()
                        cell.runs[s.name].append(measure(op, s, clients=clients, args=args))
        stack.wait_outbox_empty()
        print()
        print(cores_line())
        print(idle)
        print(table(cells))
        print()
        problems += final_checks(stack, servers)
    if problems:
        print("\n".join(["FAILED:", *problems]), flush=True)
        return 1
    return 0


def round_parser(
    doc: str,
    *,
    clients: list[int],
    rounds: int,
    rounds_help: str,
    fans: int,
    codes: int,
    codes_help: str,
) -> argparse.ArgumentParser:
    """The arguments of a benchmark in rounds (this one and gateway_filters.py): its
    docstring as help, --seconds, --clients, --rounds, --ops, --fans, --codes."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n", maxsplit=1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n\n", 1)[1],
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per run (default 10)")
    shown = ",".join(map(str, clients))
    parser.add_argument(
        "--clients",
        type=lambda s: [int(x) for x in s.split(",")],
        default=clients,
        help=f"wrk connections, comma-separated (default {shown})",
    )
    parser.add_argument(
        "--rounds", type=int, default=rounds, help=f"{rounds_help} (default {rounds})"
    )
    parser.add_argument(
        "--ops",
        type=lambda s: s.split(","),
        default=list(DEFAULT_OPS),
        help=f"of bench/hot_paths.py's (default {','.join(DEFAULT_OPS)})",
    )
    parser.add_argument("--fans", type=int, default=fans)
    parser.add_argument("--codes", type=int, default=codes, help=codes_help)
    return parser


def checked(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds and --seconds must be positive")
    return args


def bench_main(
    run: Callable[[argparse.Namespace], int],
    parse: Callable[[list[str] | None], argparse.Namespace],
    argv: list[str] | None = None,
) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(parse(argv))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = round_parser(
        __doc__,
        clients=[1, 8, 32],
        rounds=2,
        rounds_help="rounds of real and bare per cell",
        fans=100_000,
        codes=400_000,
        codes_help="Canje codes, half for each server",
    )
    parser.add_argument(
        "--gateway-threads",
        type=int,
        default=None,
        help="Envoy's worker threads of both gateways (default: loyalty gateway run's)",
    )
    return checked(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, parse_args, argv)


if __name__ == "__main__":
    sys.exit(main())
