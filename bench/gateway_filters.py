"""What the gateway's Lua filters cost Envoy per call: the real gateway against the same
configuration with its Lua filters removed (the transcoder alone), in front of one upstream,
in alternating rounds (issue 25 §4; a benchmark, not a test).

    .venv/bin/python bench/gateway_filters.py [--seconds 10] [--clients 8,32] [--rounds 3]
        [--ops ping,resolve-id,tx,redeem] [--fans 20000] [--codes 200000] [--against DIR]

Quick (about a minute and a half): `--seconds 2 --clients 8 --rounds 1 --fans 2000
--codes 4000`; the defaults run 48 runs of 3 + 10 s, about 12 minutes.

One embedded PostgreSQL with the data set of bench/_fullstack.py (its `loyalty up
--workers 1` only applies the fixture: it gets no load), one upstream, bench/_bare_server.py
(cheap and stable: no rate limit, no logs, no metrics; bench/floor.py), and two Envoys in
front of it:
- with: `loyalty gateway run`, the real gateway folder as it runs in production (the Lua
  filter of gateway/envelope.lua, the buffer filter, the Lua filter of
  gateway/request_check.lua, the transcoder, the router);
- without: the same rendering (runtime/gateway/xds.py `install`, the same spec but the
  port), then every `envoy.filters.http.lua` dropped from the listener before Envoy starts:
  the transcoder alone. A valid request goes through it the same way (a success is the same
  transcoded body; only the headers the Lua filter strips stay).

For each operation (wrk requests of bench/hot_paths.py OPS, load spread over the 64 keys)
and client count, `--rounds` rounds, each running every gateway one after the other (in
the order above in odd rounds, the other way round in even ones), each run: a warm-up (3 s, at most
`--seconds`), then `--seconds` of wrk. Per run: calls/s and Envoy's CPU per call (every
thread of the Envoy process, /proc/PID/task/*/schedstat: the request and response path,
access log line included). Then per operation and client count the medians and the Lua
share = (with - without) / with, the median of each round's share. `redeem` takes codes as
bench/floor.py does: each gateway its own share of the `Canje` codes, each code once (then
from the start of its share again: `duplicado` answers). Any answer other than 2xx makes
the exit status 1.

`--against DIR` (repeatable): one more `loyalty gateway run --gateway-dir DIR` in the same
rounds, e.g. the `gateway/` of another commit (`git archive <commit> gateway | tar -x -C
/tmp/before`, then `--against /tmp/before/gateway`):
its Envoy CPU per call and its Lua share against the same "without", so a change of the
filters is measured before/after in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import KEY, STARTUP_TIMEOUT, cores_line, cpu_ns, free_port, full_stack
from floor import (
    Served,
    _call,
    _env,
    _spawn,
    _stop,
    bench_main,
    checked,
    round_parser,
    start_bare_server,
    start_gateway,
    wrk_run,
)
from hot_paths import OPS

from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec
from loyalty_grpc.runtime.gateway.shape import LUA_FILTER, connection_managers
from loyalty_grpc.runtime.gateway.xds import dump_yaml, install, write_atomic

WARMUP_SECONDS = 3.0
WITH, WITHOUT, ABOUT = "with", "without", "against"


@dataclass
class Gateway:
    """One Envoy in front of the upstream, and the work wrk sends through it."""

    served: Served
    envoy_pid: int


@dataclass
class Cell:
    """One operation at one client count: per gateway, each round's calls/s and Envoy CPU
    per call (µs)."""

    rates: dict[str, list[float]] = field(default_factory=dict)
    envoy_us: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, rate: float, us: float) -> None:
        self.rates.setdefault(name, []).append(rate)
        self.envoy_us.setdefault(name, []).append(us)


def without_lua(listeners: Iterable[dict[str, Any]], source: str | None = None) -> int:
    """Remove the Lua HTTP filters from `listeners` (Envoy Listener documents: the rendered
    LDS resources, envoy.yaml's static listeners), only the one whose source file name is
    `source` when given; returns how many were removed."""
    removed = 0
    for listener in listeners:
        for manager in connection_managers(listener):
            kept = [
                f
                for f in manager["http_filters"]
                if f["name"] != LUA_FILTER
                or (
                    source is not None
                    and Path(
                        f["typed_config"].get("default_source_code", {}).get("filename", "")
                    ).name
                    != source
                )
            ]
            removed += len(manager["http_filters"]) - len(kept)
            manager["http_filters"] = kept
    return removed


def drop_lua_filters(listeners: Path) -> int:
    """Remove every Lua HTTP filter from a rendered LDS file (runtime/gateway/xds.py);
    returns how many were removed."""
    document = yaml.safe_load(listeners.read_text(encoding="utf-8"))
    removed = without_lua(document["resources"])
    write_atomic(listeners, dump_yaml(document))
    return removed


def _wait_ping(url: str, process: Served) -> None:
    """Until a ping with the bench's key is answered 200 through `url`."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.gateway.poll() is not None:
            raise SystemExit(f"error: the gateway {process.name} exited; see {process.work}")
        with contextlib.suppress(OSError, ValueError):
            if _call(url, "/api/v1/ping", None, KEY)[0] == 200:
                return
        time.sleep(0.3)
    raise SystemExit(f"error: no answer from {url} in time; see {process.work}")


@contextlib.contextmanager
def gateways(
    env: dict[str, str],
    work: Path,
    upstream: subprocess.Popen[bytes],
    port: int,
    *,
    against: list[Path],
    codes: int,
) -> Iterator[dict[str, Gateway]]:
    """The Envoys in front of the upstream (`upstream`, serving on `port`): "with",
    "without" and one per `against` folder, each with its share of the `codes`."""
    runs: dict[str, Path | None] = {WITH: None, WITHOUT: None}
    for directory in against:
        name = directory.resolve().name
        runs[name if name not in runs else f"{ABOUT}{len(runs) - 1}"] = directory
    share = codes // len(runs)
    started: dict[str, Gateway] = {}
    try:
        for index, (name, gateway_dir) in enumerate(runs.items()):
            folder = work / name
            folder.mkdir()
            first = 1 + index * share
            if name == WITHOUT:
                http_port = free_port()
                spec = gateway_spec(
                    http_port=http_port, upstreams=(f"127.0.0.1:{port}",), listen_host="127.0.0.1"
                )
                installed = install(spec, folder / "envoy")
                if drop_lua_filters(installed.listeners) < 1:
                    raise SystemExit("error: the rendered listener has no Lua filter")
                process = _spawn(
                    EnvoyProcess.of(spec, installed).command(), env, folder / "envoy.log"
                )
                url = f"http://127.0.0.1:{http_port}"
                served = Served(name, upstream, process, url, f"g{index}", folder, first, share)
                started[name] = Gateway(served, process.pid)
                _wait_ping(url, served)
                continue
            log = folder / "gateway.log"
            process, url = start_gateway(
                env,
                log,
                folder / "envoy",
                upstream_port=port,
                gateway_threads=None,
                gateway_dir=gateway_dir,
            )
            served = Served(name, upstream, process, url, f"g{index}", folder, first, share)
            started[name] = Gateway(served, 0)
            _wait_ping(url, served)
            envoy = sorted(served.envoy_pids())
            if len(envoy) != 1:
                raise SystemExit(f"error: `loyalty gateway run` runs Envoys {envoy}, not one")
            started[name].envoy_pid = envoy[0]
        for name, gateway in started.items():
            print(
                f"{name}: {gateway.served.url}, Envoy {gateway.envoy_pid}"
                + (f" (gateway folder {runs[name]})" if runs[name] else ""),
                flush=True,
            )
        print(f"logs in {work} (while it runs)", flush=True)
        yield started
    finally:
        for gateway in reversed(started.values()):
            _stop(gateway.served.gateway)


def measure(
    op_name: str, gateway: Gateway, *, clients: int, args: argparse.Namespace
) -> tuple[float, float]:
    """A warm-up, then one measured run: (calls/s, Envoy CPU µs per call)."""
    op = next(o for o in OPS if o.name == op_name)
    s = gateway.served
    wrk_run(op, s, clients=clients, seconds=min(WARMUP_SECONDS, args.seconds), fans=args.fans)
    before = cpu_ns(gateway.envoy_pid)
    result = wrk_run(op, s, clients=clients, seconds=args.seconds, fans=args.fans)
    spent = cpu_ns(gateway.envoy_pid) - before
    per_call = spent / 1000 / max(result.requests, 1)
    print(
        f"{op_name:10} c={clients:<3} {s.name:8} {result.rps:7.0f}/s  "
        f"Envoy {per_call:6.1f} µs/call  non2xx {result.non2xx}",
        flush=True,
    )
    if result.errors:
        print("    " + result.errors.replace("\n", "\n    "), flush=True)
    return result.rps, per_call


def table(cells: dict[tuple[str, int], Cell]) -> str:
    """Per operation and client count and gateway: medians of calls/s and Envoy µs per
    call; for each gateway with Lua, its Lua µs per call and share (the median of each
    round's (it - without) / it)."""
    lines = [
        f"{'op':10} {'c':>3} {'gateway':8} {'calls/s':>8} {'Envoy µs':>9} {'Lua µs':>7} "
        f"{'Lua share':>9}"
    ]
    for (op, clients), cell in cells.items():
        without = cell.envoy_us[WITHOUT]
        for name, per_call in cell.envoy_us.items():
            row = (
                f"{op:10} {clients:>3} {name:8} {statistics.median(cell.rates[name]):8.0f} "
                f"{statistics.median(per_call):9.1f}"
            )
            if name != WITHOUT:
                shares = [(it - wo) / it for it, wo in zip(per_call, without, strict=True) if it]
                lua = statistics.median(per_call) - statistics.median(without)
                row += f" {lua:7.1f} {100 * statistics.median(shares):7.1f} %"
            lines.append(row)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    known = {op.name for op in OPS}
    unknown = [name for name in args.ops if name not in known]
    if unknown:
        raise SystemExit(f"error: unknown operations {unknown} (known: {sorted(known)})")
    if args.codes < 2 * (2 + len(args.against)):
        raise SystemExit("error: --codes must be at least 2 per gateway")
    print(cores_line(), flush=True)
    with full_stack(fans=args.fans, codes=args.codes, workers=1) as stack:
        env = _env(stack)
        upstream_dir = stack.work / "upstream"
        upstream_dir.mkdir()
        server, port = start_bare_server(env, upstream_dir / "server.log")
        failed: list[Served] = []
        try:
            with gateways(
                env, stack.work, server, port, against=args.against, codes=args.codes
            ) as gws:
                cells: dict[tuple[str, int], Cell] = {}
                for name in args.ops:
                    for clients in args.clients:
                        cell = cells.setdefault((name, clients), Cell())
                        for round_ in range(args.rounds):
                            order = list(gws) if round_ % 2 == 0 else list(gws)[::-1]
                            for variant in order:
                                rate, us = measure(name, gws[variant], clients=clients, args=args)
                                cell.add(variant, rate, us)
                print()
                print(cores_line())
                print(table(cells))
                failed = [g.served for g in gws.values() if g.served.non2xx]
        finally:
            _stop(server)
    for s in failed:
        print(f"FAILED: {s.non2xx} answers other than 2xx through {s.name}", flush=True)
    return 1 if failed else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = round_parser(
        __doc__,
        clients=[8, 32],
        rounds=3,
        rounds_help="rounds per cell",
        fans=20_000,
        codes=200_000,
        codes_help="Canje codes, shared by the gateways",
    )
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        help="another gateway folder to measure in the same rounds (repeatable)",
    )
    return checked(parser, argv)


def main(argv: list[str] | None = None) -> int:
    return bench_main(run, parse_args, argv)


if __name__ == "__main__":
    sys.exit(main())
