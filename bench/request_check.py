"""What the gateway's strict request check (gateway/request_check.lua) costs Envoy per call:
the same requests through two Envoys, one with the check and one without it (the gateway
folder copied with that filter removed), in alternating rounds (a benchmark, not a test).

    .venv/bin/python bench/request_check.py [--seconds 5] [--rounds 4] [--clients 8]
        [--ops tx,resolve,ping,codes-5000] [--against DIR]

Both Envoys (`--concurrency 1`) proxy to one in-process gRPC server that answers every POS
method with an empty success at once, so the server does no work worth measuring; wrk
sends each operation's fixed body with a well-formed key (the gateway's edge refuses a
call without one). Per round and variant: calls/s and Envoy's CPU time per call (from
/proc). The difference of the medians is the check: a coroutine, the body handed to Lua,
the parse.

`--against DIR`: a third Envoy on another gateway folder (e.g. the `gateway/` of an older
checkout: `git worktree add /tmp/before <commit>`), in the same rounds: what this folder's
gateway costs per call more than that one (the edge's header checks, say).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import cores_line, cpu_ns, free_port, run_wrk
from gateway_filters import without_lua

from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2 as pb
from loyalty_grpc.gen.loyalty.v1 import pos_service_pb2_grpc as pb_grpc
from loyalty_grpc.runtime.gateway.envoy import EnvoyProcess, gateway_spec

GATEWAY = Path(__file__).resolve().parents[1] / "gateway"

TX = (
    '{"id_externo":"V-2026-000123","fan":"HAL0001","importe":"1,234.50",'
    '"terminal":"Caja 3","sitio":"Estadio Norte","ts":"2026-11-21T15:16:52-06:00"}'
)
CODES = (
    '{"promo":"2x1 Hot Dog","codigos":[' + ",".join(f'"HD-{i:060d}"' for i in range(5000)) + "]}"
)
# A well-formed key (the in-process server takes any).
KEY = "lp_vivo_" + "B" * 32
OPS: dict[str, tuple[str, str]] = {
    "tx": ("/api/v1/tx", TX),
    "resolve": ("/api/v1/fan/resolve", '{"fan":"HAL0001"}'),
    "ping": ("/api/v1/ping", ""),
    "codes-5000": ("/api/v1/codes", CODES),
}


class Answer(pb_grpc.PosServiceServicer):
    def Ping(
        self,
        request: pb.PingRequest,
        context: grpc.ServicerContext,
    ) -> pb.PingResponse:
        return pb.PingResponse(ok=True)

    def ResolveFan(
        self,
        request: pb.ResolveFanRequest,
        context: grpc.ServicerContext,
    ) -> pb.ResolveFanResponse:
        return pb.ResolveFanResponse(ok=True)

    def RegisterTx(
        self,
        request: pb.RegisterTxRequest,
        context: grpc.ServicerContext,
    ) -> pb.RegisterTxResponse:
        return pb.RegisterTxResponse(ok=True)

    def DepositCodes(
        self,
        request: pb.DepositCodesRequest,
        context: grpc.ServicerContext,
    ) -> pb.DepositCodesResponse:
        return pb.DepositCodesResponse(ok=True)

    def PingGet(
        self,
        request: pb.PingGetRequest,
        context: grpc.ServicerContext,
    ) -> pb.PingGetResponse:
        return pb.PingGetResponse(ok=True)

    def Redeem(
        self,
        request: pb.RedeemRequest,
        context: grpc.ServicerContext,
    ) -> pb.RedeemResponse:
        return pb.RedeemResponse(ok=True)

    def ListPromos(
        self,
        request: pb.ListPromosRequest,
        context: grpc.ServicerContext,
    ) -> pb.ListPromosResponse:
        return pb.ListPromosResponse(ok=True)

    def Roster(
        self,
        request: pb.RosterRequest,
        context: grpc.ServicerContext,
    ) -> pb.RosterResponse:
        return pb.RosterResponse(ok=True)

    def RosterPost(
        self,
        request: pb.RosterPostRequest,
        context: grpc.ServicerContext,
    ) -> pb.RosterPostResponse:
        return pb.RosterPostResponse(ok=True)


def without_check(work: Path) -> Path:
    """A copy of the gateway folder whose envoy.yaml lacks the request check filter."""
    copy = Path(shutil.copytree(GATEWAY, work / "gateway-without-check"))
    config = yaml.safe_load((copy / "envoy.yaml").read_text(encoding="utf-8"))
    if without_lua(config["static_resources"]["listeners"], "request_check.lua") != 1:
        raise SystemExit("error: envoy.yaml has no request_check.lua filter to remove")
    (copy / "envoy.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return copy


@contextmanager
def server() -> Iterator[int]:
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_PosServiceServicer_to_server(Answer(), grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    try:
        yield port
    finally:
        grpc_server.stop(grace=None)


def wrk_script(path: str, body: str) -> str:
    escaped = body.replace("\\", "\\\\").replace('"', '\\"')
    return (
        f'wrk.method = "POST"\nwrk.path = "{path}"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {KEY}"\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ops", type=lambda s: s.split(","), default=list(OPS))
    parser.add_argument("--against", type=Path, help="another gateway folder to compare with")
    args = parser.parse_args()
    print(cores_line())
    with tempfile.TemporaryDirectory(prefix="request-check-") as tmp, server() as port:
        work = Path(tmp)
        variants = {"with check": GATEWAY, "without": without_check(work)}
        if args.against is not None:
            variants["against"] = args.against.resolve()
        proxies = {
            name: EnvoyProcess.start_spec(
                gateway_spec(
                    http_port=free_port(),
                    upstreams=(f"127.0.0.1:{port}",),
                    listen_host="127.0.0.1",
                    gateway_dir=directory,
                ),
                work_dir=work / name.replace(" ", "-"),
            )
            for name, directory in variants.items()
        }
        try:
            for op in args.ops:
                path, body = OPS[op]
                script = wrk_script(path, body)
                cpu: dict[str, list[float]] = {name: [] for name in proxies}
                rate: dict[str, list[float]] = {name: [] for name in proxies}
                for _ in range(args.rounds):
                    for name, proxy in proxies.items():
                        assert proxy.pid is not None
                        before = cpu_ns(proxy.pid)
                        result = run_wrk(
                            proxy.url, script, clients=args.clients, seconds=args.seconds, work=work
                        )
                        spent = cpu_ns(proxy.pid) - before
                        if result.non2xx or result.errors:
                            raise SystemExit(
                                f"{op} {name}: {result.non2xx} non-2xx {result.errors}"
                            )
                        cpu[name].append(spent / 1000 / result.requests)
                        rate[name].append(result.rps)
                line = [f"{op:<11} body {len(body):>7,} B"]
                for name in proxies:
                    line.append(
                        f"{name}: {statistics.median(rate[name]):>6,.0f}/s, Envoy "
                        f"{statistics.median(cpu[name]):>6.1f} µs/call "
                        f"({min(cpu[name]):.1f}–{max(cpu[name]):.1f})"
                    )
                extra = statistics.median(cpu["with check"]) - statistics.median(cpu["without"])
                line.append(f"check: {extra:+.1f} µs/call")
                if "against" in cpu:
                    more = statistics.median(cpu["with check"]) - statistics.median(cpu["against"])
                    line.append(f"vs against: {more:+.1f} µs/call")
                print(" | ".join(line), flush=True)
        finally:
            for proxy in proxies.values():
                proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
