"""The cashier's hot paths through the whole product, against pgbench doing the same work
as plain SQL on the same tables, in one run (a benchmark, not a test).

    .venv/bin/python bench/hot_paths.py [--seconds 10] [--clients 1,8,32] [--gateway-threads N]
        [--ops tx,resolve-id,resolve-correo,resolve-url,resolve-codigo,resolve-qr,redeem,ping]
        [--fans 100000] [--codes 400000] [--workers N] [--profile OP:CLIENTS]

It starts `loyalty up` (Envoy, the gRPC workers, the wallet sender with the local
provider, metrics, JSON logs, the rate limiter raised so it never refuses) on a fresh
embedded PostgreSQL, loads the data set of bench/_fullstack.py with set-based SQL (100,000
fans by default), then for every operation and client count: 3 s of warm-up, `--seconds`
of wrk through Envoy (load spread over 64 keys), then pgbench running the same operation
as SQL statements for as long. It prints calls/s, p50/p99, non-2xx responses, pgbench's
TPS, their ratio and the CPU time per call of each process group (Envoy; the server:
`loyalty up`, its workers and the wallet sender; PostgreSQL; the whole machine including
wrk). At the end: the ledger audit (per fan, balance = sum of the ledger).

The pgbench side of each operation (durable commits, like the server's):
- tx: the sale as the 7 round trips of shared/bench/tx_vs_pgbench.sh (BEGIN, key, program,
  fan, insert sale, balance+ledger+outbox, COMMIT);
- resolve-*: key, the fan by that form's own index, the fan's current promotion (3);
- redeem: BEGIN, key, lock the code, redeem it, balance+ledger+outbox, COMMIT (6);
- ping: the key lookup alone (1).

`--profile tx:8` records py-spy profiles (raw, --gil) of every server process during that
run into bench-profile.<pid>.txt (py-spy, a dev dependency: `./dev` installs it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _fullstack import (
    KEY,
    PROGRAM,
    STATEMENTS,
    FullStack,
    cores_line,
    cpu_ms_per_call,
    cpu_snapshot,
    full_stack,
    run_pgbench,
    run_wrk,
)

WARMUP_SECONDS = 3.0


@dataclass(frozen=True)
class Op:
    name: str
    wrk: str  # the body of wrk's request() function
    pgbench: str  # pgbench script; {keyhash} is the key's SHA-256 in hex


_KEY_SQL = (
    "SELECT id, programa_id, modo, permisos FROM claves\n"
    "  WHERE hash = decode('{keyhash}', 'hex') AND revocada IS NULL;\n"
)


def _resolve(form: str, value_lua: str, fan_sql: str) -> Op:
    return Op(
        name=f"resolve-{form}",
        wrk=f"""
function request()
  local g = math.random(1, {{fans}})
  return post("/api/v1/fan/resolve", '{{"fan":"' .. {value_lua} .. '"}}')
end
""",
        pgbench="\\set g random(1, {fans})\n"
        + _KEY_SQL
        + f"""\
SELECT pk AS fpk FROM fans
  WHERE programa_id = '{PROGRAM}' AND {fan_sql} AND estado = 'activo' \\gset
SELECT p.nombre, p.descripcion, p.vigencia_fin, c.codigo
  FROM codigos c JOIN promos p ON p.programa_id = c.programa_id AND p.id = c.promo_id
  WHERE c.programa_id = '{PROGRAM}' AND c.fan_pk = :fpk AND c.estado = 'asignado'
    AND p.estado = 'activa'
    AND p.vigencia_fin >= current_date
  ORDER BY p.vigencia_fin, c.id LIMIT 1;
""",
    )


_CREDIT_SQL = """\
WITH c AS (UPDATE fans SET puntos = puntos + {pts}
           WHERE programa_id = '{program}' AND pk = :fpk RETURNING pk, puntos),
     l AS (INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, {ref_column})
           SELECT '{program}', pk, {pts}, '{motivo}', {ref} FROM c),
     o AS (INSERT INTO wallet_outbox (programa_id, fan_pk, saldo)
           SELECT '{program}', pk, puntos FROM c)
SELECT puntos FROM c;
"""

OPS = [
    Op(
        name="tx",
        wrk="""
function request()
  counter = counter + 1
  local fan = string.format("F%06d", math.random(1, {fans}))
  local body = string.format('{"id_externo":"w%d-%d-%d","fan":"%s",'
    .. '"importe":"$1,234.50","terminal":"T1"}', tid, start, counter, fan)
  return post("/api/v1/tx", body)
end
""",
        pgbench="\\set f random(1, {fans})\n\\set x random(1, 9000000000000000)\nBEGIN;\n"
        + _KEY_SQL
        + f"""\
SELECT tasa_puntos, moneda FROM programas WHERE id = '{PROGRAM}';
SELECT pk AS fpk FROM fans WHERE programa_id = '{PROGRAM}'
  AND fan_id = 'F' || lpad(:f::text, 6, '0') AND estado = 'activo' \\gset
INSERT INTO ventas (id, programa_id, modo, id_externo, fan_pk, importe_centavos, moneda,
                    terminal, ts, puntos, clave_id)
  VALUES (nextval('ventas_folio_seq'), '{PROGRAM}', 'vivo', 'pg' || :x, :fpk, 123450,
          'MXN', 'T1', now(), 123, (SELECT min(id) FROM claves))
  ON CONFLICT DO NOTHING RETURNING id AS vid \\gset
"""
        + _CREDIT_SQL.format(
            pts=123, ref_column="venta_id", motivo="venta", ref=":vid", program=PROGRAM
        )
        + "END;\n",
    ),
    _resolve("id", 'string.format("f%06d", g)', "fan_id = 'F' || lpad(:g::text, 6, '0')"),
    _resolve("correo", '"F" .. g .. "@Example.com"', "lower(correo) = 'f' || :g || '@example.com'"),
    _resolve("url", '"https://bench.example/fan/v/qr-" .. g', "qr_token = 'qr-' || :g"),
    _resolve(
        "codigo",
        'string.format("r%08d", g)',
        "pk = (SELECT fan_pk FROM codigos WHERE programa_id = 'bench' AND codigo = "
        "'R' || lpad(:g::text, 8, '0') AND estado IN ('asignado', 'canjeado') LIMIT 1)",
    ),
    _resolve("qr", '"qr-" .. g', "qr_token = 'qr-' || :g"),
    # wrk redeems the first half of the `Canje` codes, pgbench the second half.
    Op(
        name="redeem",
        wrk="""
function request()
  local body = string.format('{"codigo":"C%08d","terminal":"T1"}', math.random(1, {half}))
  return post("/api/v1/redeem", body)
end
""",
        pgbench="\\set c random({codes} / 2 + 1, {codes})\nBEGIN;\n"
        + _KEY_SQL
        + f"""\
SELECT c.id AS cid, c.fan_pk AS fpk, p.puntos_canje AS pts
  FROM codigos c JOIN promos p ON p.programa_id = c.programa_id AND p.id = c.promo_id
  WHERE c.programa_id = '{PROGRAM}' AND c.codigo = 'C' || lpad(:c::text, 8, '0')
  ORDER BY c.id FOR NO KEY UPDATE OF c \\gset
UPDATE codigos SET estado = 'canjeado', canjeado_en = now(), canje_terminal = 'T1',
                   canje_registrado = now()
  WHERE programa_id = '{PROGRAM}' AND id = :cid AND estado = 'asignado';
"""
        + _CREDIT_SQL.format(
            pts=":pts", ref_column="codigo_id", motivo="canje", ref=":cid", program=PROGRAM
        )
        + "END;\n",
    ),
    Op(
        name="ping",
        wrk="""
function request()
  return wrk.format("POST", "/api/v1/ping", {["Authorization"] = "Bearer " .. key()}, "")
end
""",
        pgbench=_KEY_SQL,
    ),
]


def _profile(stack: FullStack, seconds: float) -> list[subprocess.Popen[bytes]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("error: --profile needs py-spy (pip install py-spy)")
    return [
        subprocess.Popen(
            [
                spy,
                "record",
                "-r",
                "200",
                "-d",
                f"{seconds - 1:.0f}",
                "-f",
                "raw",
                "--gil",
                "--nonblocking",
                "-o",
                f"bench-profile.{pid}.txt",
                "-p",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in stack.python_pids()
    ]


def run(args: argparse.Namespace) -> int:
    ops = [op for op in OPS if op.name in args.ops]
    unknown = set(args.ops) - {op.name for op in OPS}
    if unknown:
        raise SystemExit(f"error: unknown operations {sorted(unknown)}")
    print(cores_line(), flush=True)
    failures = 0
    with full_stack(
        fans=args.fans,
        codes=args.codes,
        workers=args.workers,
        gateway_threads=args.gateway_threads,
        pg_options=STATEMENTS if args.statements else (),
    ) as stack:
        if args.statements:
            stack.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for op in ops:
            fill = {"fans": args.fans, "codes": args.codes}
            wrk_script = op.wrk.replace("{fans}", str(args.fans)).replace(
                "{half}", str(args.codes // 2)
            )
            pg_script = op.pgbench.format(keyhash=stack.key_hash(KEY), **fill)
            for clients in args.clients:
                stack.wait_outbox_empty()
                run_wrk(
                    stack.http_url,
                    wrk_script,
                    clients=clients,
                    seconds=WARMUP_SECONDS,
                    work=stack.work,
                )
                spies = (
                    _profile(stack, args.seconds) if args.profile == f"{op.name}:{clients}" else []
                )
                if args.statements:
                    stack.top_statements()  # reset: only this run's statements
                before = cpu_snapshot(stack)
                result = run_wrk(
                    stack.http_url,
                    wrk_script,
                    clients=clients,
                    seconds=args.seconds,
                    work=stack.work,
                )
                after = cpu_snapshot(stack)
                if args.statements:
                    with Path(args.statements).open("a") as out:
                        out.write(
                            f"== {op.name} c={clients} ({result.requests} calls)\n"
                            f"{stack.top_statements()}\n"
                        )
                for spy in spies:
                    spy.wait()
                tps = run_pgbench(stack, pg_script, clients=clients, seconds=args.seconds)
                cpu = cpu_ms_per_call(before, after, result.requests)
                failures += result.non2xx
                print(
                    f"{op.name:15} c={clients:<3} {result.rps:7.0f}/s  p50 {result.p50_ms:6.2f} "
                    f"p99 {result.p99_ms:6.2f} ms  non2xx {result.non2xx:<3}| pgbench "
                    f"{tps:7.0f}  ratio {result.rps / tps:4.2f} | CPU ms/call envoy "
                    f"{cpu['envoy']:.2f} server {cpu['server']:.2f} pg {cpu['pg']:.2f} "
                    f"machine {cpu['machine']:.2f}",
                    flush=True,
                )
                if result.errors:
                    print("    " + result.errors.replace("\n", "\n    "), flush=True)
        stack.wait_outbox_empty()
        print(stack.audit())
    return 1 if failures else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32]
    )
    parser.add_argument("--ops", type=lambda s: s.split(","), default=[op.name for op in OPS])
    parser.add_argument("--fans", type=int, default=100_000)
    parser.add_argument("--codes", type=int, default=400_000)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="gRPC worker processes (default: loyalty up's, the CPU count)",
    )
    parser.add_argument(
        "--gateway-threads",
        type=int,
        default=None,
        help="Envoy's worker threads (default: loyalty up's, a quarter of the CPU count)",
    )
    parser.add_argument(
        "--statements",
        metavar="FILE",
        default="",
        help="append pg_stat_statements' top statements of each run to FILE",
    )
    parser.add_argument(
        "--profile",
        metavar="OP:CLIENTS",
        default="",
        help="py-spy profiles of the server processes during that run",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
