"""The edge under attack (issue 22 §1): what clients without a valid key do to a cashier's
latency. A benchmark, not a test.

    .venv/bin/python bench/edge_attack.py [--seconds 10] [--rounds 2] [--attackers 3]
        [--workers N] [--fans 1000] [--only NAME,NAME]

`loyalty up` as bench/hot_paths.py runs it (all features on; a fresh embedded PostgreSQL
in a temporary directory; everything on loopback). One keyed client (one connection, the
key of a real POS integration) measures `GET /api/v1/ping` and then `POST /api/v1/tx`
(a new sale each call) for `--seconds` each, first quiet and then while these attackers
run, each with `--attackers` connections:

- `nokey-870kb`: POST fan/resolve with the issue's body, `{"fan":"x","k0":1,…}` of
  80,000 keys, and no Authorization header;
- `malformed-key`: GET ping with `Authorization: Bearer nope`;
- `random-keys`: POST fan/resolve with a new well-formed key (`lp_vivo_` and 32 random
  letters) each call: they reach the server, which looks each one up;
- `codes-random-keys`: POST codes with a 335 KB body of 5,000 codes (under the limit:
  read and parsed whole) and a new well-formed key each call;
- `codes-80000-members`: POST codes with a 690 KB body of 80,000 members and a new
  well-formed key (read whole, the parse stops at the member limit);
- `chunked`: POST fan/resolve with a chunked body (no Content-Length) of 16 KB (twice its
  limit) and a new well-formed key (the request written out by hand: wrk sends what
  request() returns).

All the attackers' connections come from 127.0.0.1, like the keyed client's: once the
server blocks that address for failed key checks (issue 22 §2, the server's side), the
gateway refuses the attackers' keys from their headers while the keyed client's key,
seen working, goes on.

It prints, per round, the keyed client's p50 and p99 quiet and under attack, the CPU the
gateway (Envoy) and the server took during the attack, and each attacker's answers by
HTTP status; at the end the medians and the issue's target (keyed p50 under attack within
2x of quiet and under 20 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import (
    KEY,
    STATUS_TALLY,
    WRK_CHECK,
    WRK_PRELUDE,
    cores_line,
    cpu_ms_per_call,
    cpu_snapshot,
    ensure_wrk,
    full_stack,
    run_wrk,
)

RANDOM_KEY = """
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local function random_key()
  local out = {}
  for i = 1, 32 do
    local n = math.random(1, #alphabet)
    out[i] = alphabet:sub(n, n)
  end
  return "lp_vivo_" .. table.concat(out)
end
"""

KEYED_PING = f"""
function request()
  return wrk.format("GET", "/api/v1/ping", {{["Authorization"] = "Bearer {KEY}"}})
end
"""

KEYED_TX = f"""
function request()
  counter = counter + 1
  return wrk.format("POST", "/api/v1/tx", {{["Authorization"] = "Bearer {KEY}",
    ["Content-Type"] = "application/json"}},
    string.format('{{"id_externo":"edge-%d-%d-%d","fan":"F%06d","importe":"$99.50"}}',
      tid, start, counter, 1 + counter % {{fans}}))
end
"""

ATTACKS: dict[str, str] = {
    "nokey-870kb": """
local parts = {'{"fan":"x"'}
for i = 0, 79999 do parts[#parts + 1] = ',"k' .. i .. '":1' end
local body = table.concat(parts) .. "}"
function request()
  return wrk.format("POST", "/api/v1/fan/resolve", {["Content-Type"] = "application/json"}, body)
end
""",
    "malformed-key": """
function request()
  return wrk.format("GET", "/api/v1/ping", {["Authorization"] = "Bearer nope"})
end
""",
    "random-keys": RANDOM_KEY
    + """
function request()
  return wrk.format("POST", "/api/v1/fan/resolve", {["Authorization"] = "Bearer " .. random_key(),
    ["Content-Type"] = "application/json"}, '{"fan":"F000001"}')
end
""",
    "codes-random-keys": RANDOM_KEY
    + """
local parts = {}
for i = 1, 5000 do parts[i] = string.format('"ATK-%060d"', i) end
local body = '{"promo":"Canje","codigos":[' .. table.concat(parts, ",") .. "]}"
function request()
  return wrk.format("POST", "/api/v1/codes", {["Authorization"] = "Bearer " .. random_key(),
    ["Content-Type"] = "application/json"}, body)
end
""",
    "codes-80000-members": RANDOM_KEY
    + """
local parts = {'{"promo":"Canje"'}
for i = 0, 79999 do parts[#parts + 1] = ',"k' .. i .. '":1' end
local body = table.concat(parts) .. "}"
function request()
  return wrk.format("POST", "/api/v1/codes", {["Authorization"] = "Bearer " .. random_key(),
    ["Content-Type"] = "application/json"}, body)
end
""",
    # wrk sends whatever request() returns: here a chunked request written out by hand.
    "chunked": RANDOM_KEY
    + """
local chunk = string.format("%x\\r\\n", 1024) .. string.rep(" ", 1024) .. "\\r\\n"
local chunks = string.rep(chunk, 16) .. "0\\r\\n\\r\\n"
function request()
  return "POST /api/v1/fan/resolve HTTP/1.1\\r\\nHost: pos.example\\r\\n"
    .. "Authorization: Bearer " .. random_key() .. "\\r\\n"
    .. "Content-Type: application/json\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
    .. chunks
end
""",
}
TIMEOUT = 10.0


@dataclass
class Attacker:
    name: str
    process: subprocess.Popen[bytes]
    output: Path
    statuses: Counter[str] = field(default_factory=Counter)
    errors: str = ""


def start_wrk_attack(
    name: str,
    script: str,
    url: str,
    *,
    connections: int,
    seconds: float,
    work: Path,
    nice: int,
) -> Attacker:
    path = work / f"attack-{abs(hash(name))}.lua"
    path.write_text(WRK_PRELUDE + script + WRK_CHECK + STATUS_TALLY)
    output = work / f"attack-{abs(hash(name))}.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [
                "nice",
                "-n",
                str(nice),
                ensure_wrk(),
                "-t1",
                f"-c{connections}",
                f"-d{seconds:g}s",
                "--timeout",
                f"{TIMEOUT:g}s",
                "-s",
                str(path),
                url,
            ],
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
    return Attacker(name, process, output)


def start_attackers(
    url: str, names: list[str], *, connections: int, seconds: float, work: Path, nice: int
) -> list[Attacker]:
    return [
        start_wrk_attack(
            name,
            ATTACKS[name],
            url,
            connections=connections,
            seconds=seconds,
            work=work,
            nice=nice,
        )
        for name in names
    ]


def finish(attackers: list[Attacker], timeout: float) -> None:
    """Wait for the attackers (they stop at their deadline; killed past `timeout`) and read
    their answers by status."""
    deadline = time.monotonic() + timeout
    for attacker in attackers:
        try:
            attacker.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            attacker.process.send_signal(signal.SIGKILL)
            attacker.process.wait()
        lines = attacker.output.read_text(errors="replace").splitlines()
        found = [line for line in lines if line.startswith("STATUSES ")]
        if found:
            attacker.statuses.update(json.loads(found[-1].removeprefix("STATUSES ")))
        # Connections the gateway closed on a body it would not read count as wrk errors.
        attacker.errors = next((line.strip() for line in lines if "Socket errors" in line), "")


@dataclass
class Latency:
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)


def measure(url: str, script: str, seconds: float, work: Path, into: Latency) -> str:
    result = run_wrk(url, script, clients=1, seconds=seconds, work=work)
    into.p50.append(result.p50_ms)
    into.p99.append(result.p99_ms)
    into.calls.append(result.requests)
    note = f" ({result.non2xx} non-2xx: {result.errors[:200]})" if result.non2xx else ""
    return (
        f"p50 {result.p50_ms:6.2f} ms  p99 {result.p99_ms:7.2f} ms  "
        f"{result.requests:6,} calls{note}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--attackers", type=int, default=3, help="connections per attack")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--fans", type=int, default=1000)
    parser.add_argument(
        "--attacker-nice",
        type=int,
        default=0,
        help="run the attackers' wrk at this nice level (19: their own CPU does not compete "
        "with the service's, as an attack from other machines would not; default 0)",
    )
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=list(ATTACKS),
        help=f"the attacks to run, by name (default all: {','.join(ATTACKS)})",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.only) - set(ATTACKS))
    if unknown:
        parser.error(f"unknown attacks: {', '.join(unknown)}")
    print(cores_line(), flush=True)
    print(f"attackers: {args.attackers} connections each, wrk at nice {args.attacker_nice}")
    keyed = {"ping": KEYED_PING, "tx": KEYED_TX.replace("{fans}", str(args.fans))}
    quiet = {op: Latency() for op in keyed}
    attacked = {op: Latency() for op in keyed}
    with full_stack(fans=args.fans, codes=10, workers=args.workers) as stack:
        work = stack.work
        for script in keyed.values():  # warm the key cache and the connections
            run_wrk(stack.http_url, script, clients=1, seconds=1, work=work)
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}", flush=True)
            for op, script in keyed.items():
                line = measure(stack.http_url, script, args.seconds, work, quiet[op])
                print(f"  quiet         {op:4}  {line}", flush=True)
            attack_seconds = 2 + 2 * args.seconds + 2
            attackers = start_attackers(
                stack.http_url,
                args.only,
                connections=args.attackers,
                seconds=attack_seconds,
                work=work,
                nice=args.attacker_nice,
            )
            time.sleep(2)  # the attack gets going
            before = cpu_snapshot(stack)
            calls = 0
            for op, script in keyed.items():
                line = measure(stack.http_url, script, args.seconds, work, attacked[op])
                calls += attacked[op].calls[-1]
                print(f"  under attack  {op:4}  {line}", flush=True)
            spent = cpu_ms_per_call(before, cpu_snapshot(stack), 1)
            share = {
                name: spent[name] / (2 * args.seconds) / 10 for name in ("envoy", "server", "pg")
            }
            print(
                "  CPU during the attack, % of one core: "
                + ", ".join(f"{name} {value:.0f}" for name, value in share.items()),
                flush=True,
            )
            finish(attackers, timeout=attack_seconds + 30)
            for attacker in attackers:
                answers = ", ".join(
                    f"{status}: {n:,}" for status, n in sorted(attacker.statuses.items())
                )
                errors = f" | wrk {attacker.errors}" if attacker.errors else ""
                print(
                    f"  attacker {attacker.name:20} {answers or '(no answer)'}{errors}", flush=True
                )
    print("medians")
    verdicts = []
    for op in keyed:
        q50, q99 = statistics.median(quiet[op].p50), statistics.median(quiet[op].p99)
        a50, a99 = statistics.median(attacked[op].p50), statistics.median(attacked[op].p99)
        ratio = a50 / q50 if q50 else float("inf")
        ok = ratio <= 2 and a50 < 20
        verdicts.append(ok)
        print(
            f"  {op:4} quiet p50 {q50:6.2f} p99 {q99:7.2f} ms | under attack p50 {a50:6.2f} "
            f"p99 {a99:7.2f} ms | p50 x{ratio:.2f} | target (x2, < 20 ms): "
            f"{'met' if ok else 'NOT met'}"
        )
    print(f"os.cpu_count() = {os.cpu_count()}")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
