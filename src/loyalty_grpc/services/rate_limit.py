"""The per-key call limit, applied in PostgreSQL: one statement, one round trip per call.

`INSERT ... ON CONFLICT (clave_id) DO UPDATE ... RETURNING` on the key's single row of the
UNLOGGED table `limite_llamadas` (store/tables.py). The DO UPDATE runs with the row locked,
so the calls of one key are serialised across every thread, process and host that shares
the database; the time is the database's clock read under that lock (`clock_timestamp()`),
so hosts with skewed clocks agree. The update is domain/rate_limit.py's `take` in SQL:
shift the 61 per-second counters to the current second, sum them, and count the call only
when the sum is under the limit. tests/integration/test_rate_limit.py runs both on the same
call sequences and compares.

Run in autocommit: the statement is its own transaction (no BEGIN/COMMIT round trips).
Rows idle for more than a window are deleted every PURGE_SECONDS per process (a row whose
newest second left the window holds only zeros: deleting it loses nothing).
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine, text

from loyalty_grpc.domain.rate_limit import SLOTS, Cuota, cuota

PURGE_SECONDS = 300.0

_NOW = "floor(extract(epoch FROM clock_timestamp()))::bigint"
# :segundo is None in production (the database clock); tests pass a second to replay a
# sequence deterministically.
_TAKE = text(f"""
INSERT INTO limite_llamadas AS l (clave_id, segundo, cuentas, admitida)
VALUES (:clave_id, coalesce(CAST(:segundo AS bigint), {_NOW}),
        array_fill(0, ARRAY[{SLOTS - 1}]) || 1, true)
ON CONFLICT (clave_id) DO UPDATE SET (segundo, cuentas, admitida) = (
  SELECT v.segundo,
         CASE WHEN v.usadas < :limite
              THEN v.cuentas[1:{SLOTS - 1}] || (v.cuentas[{SLOTS}] + 1)
              ELSE v.cuentas END,
         v.usadas < :limite
  FROM (
    SELECT w.segundo, w.cuentas,
           (SELECT coalesce(sum(c), 0) FROM unnest(w.cuentas) AS c) AS usadas
    FROM (
      SELECT s.segundo,
             CASE WHEN s.segundo - l.segundo >= {SLOTS} THEN array_fill(0, ARRAY[{SLOTS}])
                  ELSE l.cuentas[(s.segundo - l.segundo)::int + 1 : {SLOTS}]
                       || array_fill(0, ARRAY[(s.segundo - l.segundo)::int])
             END AS cuentas
      FROM (SELECT greatest(l.segundo, coalesce(CAST(:segundo AS bigint), {_NOW}))
                   AS segundo) AS s
    ) AS w
  ) AS v
)
RETURNING segundo, cuentas, admitida
""")  # noqa: S608 (only constants are interpolated)

_PURGE = text(f"DELETE FROM limite_llamadas WHERE segundo < {_NOW} - {SLOTS}")  # noqa: S608


class RateLimiter:
    """`limit` calls per key in any 60 s (limit >= 1)."""

    def __init__(self, engine: Engine, limit: int, *, purge_seconds: float = PURGE_SECONDS
                 ) -> None:
        if limit < 1:
            raise ValueError("the limit must be at least 1 (0 means: no RateLimiter)")
        self.limit = limit
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._purge_seconds = purge_seconds
        self._next_purge = time.monotonic() + purge_seconds
        self._purge_lock = threading.Lock()

    def take(self, clave_id: int, *, segundo: int | None = None) -> Cuota:
        """Count one call of the key if the window has room; the client's view either way."""
        with self._engine.connect() as conn:
            row = conn.execute(_TAKE, {"clave_id": clave_id, "segundo": segundo,
                                       "limite": self.limit}).one()
            if time.monotonic() >= self._next_purge and self._purge_lock.acquire(blocking=False):
                try:
                    self._next_purge = time.monotonic() + self._purge_seconds
                    conn.execute(_PURGE)
                finally:
                    self._purge_lock.release()
        return cuota(row.cuentas, self.limit, admitida=row.admitida)
