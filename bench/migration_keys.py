"""What migrations 0012 (keys by program, expand) and 0020 (contract) cost on a database
with data, for docs/deployment.md "Upgrades" (a benchmark, not a test).

    .venv/bin/python bench/migration_keys.py [--fans 100000] [--sales 1000000] [--codes 200000]

It starts a fresh embedded PostgreSQL in a temporary directory, migrates it to 0011, loads
with set-based SQL (generate_series) one program with `--fans` fans, `--sales` sales each
with its ledger entry and wallet outbox row, and `--codes` codes (half delivered to fans),
then VACUUM ANALYZE and a CHECKPOINT, and times `loyalty migrate`'s two steps as the
operator runs them: `upgrade(url)` (0012, which stops before the contract) and
`upgrade(url, contract=True)` (0020). Both hold an exclusive lock on the program tables
for their whole run: the time is how long every call waits. It prints the row counts,
each step's seconds and os.cpu_count().
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sqlalchemy import Engine, text

LOAD = """
INSERT INTO programas (id, nombre, tasa_puntos) VALUES ('bench', 'Bench', 0.1);
INSERT INTO claves (programa_id, hash, modo, integracion, sufijo)
VALUES ('bench', '\\x01', 'vivo', 'bench', '0001');
INSERT INTO fans (programa_id, fan_id, nombre, correo, socio_desde, qr_token)
SELECT 'bench', 'F' || g, 'Fan ' || g, 'f' || g || '@example.com', 2020, 'q' || g
FROM generate_series(1, :fans) AS g;
INSERT INTO promos (programa_id, nombre, vigencia_fin) VALUES ('bench', 'P', '2099-12-31');
INSERT INTO codigos (promo_id, programa_id, codigo, estado, fan_pk)
SELECT (SELECT id FROM promos), 'bench', 'C' || g,
       CASE WHEN g % 2 = 0 THEN 'asignado' ELSE 'disponible' END,
       CASE WHEN g % 2 = 0 THEN 1 + g % :fans END
FROM generate_series(1, :codes) AS g;
INSERT INTO ventas (programa_id, modo, id_externo, fan_pk, importe_centavos, moneda, ts,
                    puntos, clave_id)
SELECT 'bench', 'vivo', 'v' || g, 1 + g % :fans, 1000, 'MXN', now(), 10,
       (SELECT id FROM claves)
FROM generate_series(1, :sales) AS g;
INSERT INTO movimientos (fan_pk, puntos, motivo, venta_id)
SELECT fan_pk, puntos, 'venta', id FROM ventas;
UPDATE fans f SET puntos = s.p FROM (
  SELECT fan_pk, sum(puntos) AS p FROM movimientos GROUP BY fan_pk
) s WHERE s.fan_pk = f.pk;
INSERT INTO wallet_outbox (fan_pk, saldo) SELECT pk, puntos FROM fans;
"""

COUNTS = ["fans", "codigos", "ventas", "movimientos", "wallet_outbox"]


def load(engine: Engine, fans: int, sales: int, codes: int) -> float:
    start = time.perf_counter()
    with engine.begin() as conn:
        for statement in LOAD.split(";\n"):
            if statement.strip():
                conn.execute(text(statement), {"fans": fans, "sales": sales, "codes": codes})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        conn.execute(text("CHECKPOINT"))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fans", type=int, default=100_000)
    parser.add_argument("--sales", type=int, default=1_000_000)
    parser.add_argument("--codes", type=int, default=200_000)
    args = parser.parse_args()

    from loyalty_grpc.runtime.postgres import start_embedded
    from loyalty_grpc.store import migrate
    from loyalty_grpc.store.db import make_engine

    with tempfile.TemporaryDirectory(prefix="bench-migration-") as work:
        db = start_embedded(Path(work) / "pgdata", delete_on_stop=True)
        try:
            migrate.upgrade(db.url, "0011")
            engine = make_engine(db.url, pool_size=1)
            try:
                loaded = load(engine, args.fans, args.sales, args.codes)
                with engine.connect() as conn:
                    rows = {
                        t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
                        for t in COUNTS
                    }
            finally:
                engine.dispose()
            print("rows: " + ", ".join(f"{t} {n:,}" for t, n in rows.items()))
            print(f"loaded in {loaded:.1f} s")
            start = time.perf_counter()
            assert migrate.upgrade(db.url) == "0013"
            expand = time.perf_counter() - start
            start = time.perf_counter()
            assert migrate.upgrade(db.url, contract=True) == "0020"
            contract = time.perf_counter() - start
        finally:
            db.stop()
    print(f"0012 (expand):   {expand:.1f} s")
    print(f"0020 (contract): {contract:.1f} s")
    print(f"os.cpu_count() = {os.cpu_count()}")


if __name__ == "__main__":
    main()
