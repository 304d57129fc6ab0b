"""A long mixed load through the whole product: no 5xx, no lost or doubled point (a
benchmark, not a test).

    .venv/bin/python bench/soak.py [--seconds 600] [--clients 64] [--fans 100000]

`loyalty up` as bench/hot_paths.py runs it (all features on), then wrk with `--clients`
connections for `--seconds`, each request picked at random: 40 % `tx`, 30 % `fan/resolve`
(the five forms in turn), 20 % `redeem` of one code, 10 % `ping`, spread over 64 keys.
It prints the calls per HTTP status, the first responses that were not 2xx (status and
body), Envoy's access-log lines of every 5xx (response flags, upstream host), the server's
WARNING/ERROR lines, and the ledger audit. Exit code 1 when any response was not 2xx or the
audit is not exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import STATUS_TALLY, cores_line, full_stack, run_wrk

MIXED = """
local forms = {
  function(g) return string.format("F%06d", g) end,
  function(g) return "f" .. g .. "@example.com" end,
  function(g) return "https://bench.example/fan/v/qr-" .. g end,
  function(g) return string.format("R%08d", g) end,
  function(g) return "qr-" .. g end,
}
function request()
  counter = counter + 1
  local pick = math.random(1, 10)
  local g = math.random(1, {fans})
  if pick <= 4 then
    return post("/api/v1/tx", string.format('{"id_externo":"s%d-%d-%d","fan":"F%06d",'
      .. '"importe":"$99.50"}', tid, start, counter, g))
  elseif pick <= 7 then
    return post("/api/v1/fan/resolve", '{"fan":"' .. forms[1 + counter % 5](g) .. '"}')
  elseif pick <= 9 then
    return post("/api/v1/redeem",
      string.format('{"codigo":"C%08d"}', math.random(1, {codes})))
  end
  return wrk.format("POST", "/api/v1/ping", {["Authorization"] = "Bearer " .. key()}, "")
end
"""

# Envoy's counters of the cluster that explain a 503 (resets, retries, overflows).
UPSTREAM_STATS = (
    "upstream_rq_total",
    "upstream_rq_retry",
    "upstream_rq_retry_success",
    "upstream_rq_retry_overflow",
    "upstream_rq_pending_overflow",
    "upstream_rq_rx_reset",
    "upstream_rq_tx_reset",
    "upstream_cx_destroy_remote_with_active_rq",
    "upstream_cx_connect_fail",
    "upstream_cx_total",
    "upstream_rq_timeout",
)


def envoy_upstream_stats(work: Path) -> str:
    from loyalty_grpc.runtime.gateway.xds import WorkDir

    admin = WorkDir(work / "data" / "envoy").admin()
    try:
        _, body = admin.get("/stats?filter=^cluster\\.loyalty_grpc\\.")
    except OSError as exc:
        return f"(Envoy's admin socket {admin} does not answer: {exc})"
    values = dict(line.split(": ", 1) for line in body.splitlines() if ": " in line)
    return ", ".join(
        f"{name} {values.get(f'cluster.loyalty_grpc.{name}', '?')}" for name in UPSTREAM_STATS
    )


def run(args: argparse.Namespace) -> int:
    print(cores_line(), flush=True)
    with full_stack(fans=args.fans, codes=args.codes) as stack:
        script = MIXED.replace("{fans}", str(args.fans)).replace("{codes}", str(args.codes))
        log = stack.work / "up.log"
        mark = len(log.read_text().splitlines())
        result = run_wrk(
            stack.http_url,
            script,
            clients=args.clients,
            seconds=args.seconds,
            work=stack.work,
            epilogue=STATUS_TALLY,
        )
        print(
            f"{args.seconds:.0f} s, {args.clients} clients: {result.requests} calls, "
            f"{result.rps:.0f}/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
            f"not 2xx: {result.non2xx}"
        )
        print(f"calls by HTTP status: {result.statuses}")
        if result.errors:
            print("first failures:\n    " + result.errors.replace("\n", "\n    "))
        envoy_log = stack.work / "data" / "envoy" / "envoy.log"
        if envoy_log.exists():
            fives = [
                line
                for line in envoy_log.read_text().splitlines()
                if line.startswith("{") and str(json.loads(line).get("status", ""))[:1] == "5"
            ]
            print(f"Envoy access log: {len(fives)} 5xx")
            for line in fives[:10]:
                print("    " + line)
        print("Envoy's upstream counters: " + envoy_upstream_stats(stack.work))
        noisy = [
            line
            for line in log.read_text().splitlines()[mark:]
            if " WARNING " in line
            or " ERROR " in line
            or '"level":"WARNING"' in line
            or '"level":"ERROR"' in line
        ]
        print(f"server WARNING/ERROR lines: {len(noisy)}")
        for line in noisy[:10]:
            print("    " + line[:300])
        stack.wait_outbox_empty()
        audit = stack.audit()
        print(audit)
        exact = audit.startswith("ledger audit: 0 ")
    return 0 if result.non2xx == 0 and exact else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--fans", type=int, default=100_000)
    parser.add_argument("--codes", type=int, default=400_000)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
