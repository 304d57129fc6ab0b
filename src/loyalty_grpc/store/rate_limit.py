"""The per-key call limit's counters in PostgreSQL: one statement, one round trip.

`INSERT ... ON CONFLICT (clave_id) DO UPDATE ... RETURNING` on the key's single row of the
UNLOGGED table `limite_llamadas` (store/tables.py). The DO UPDATE runs with the row locked,
so the requests of one key are serialised across every thread, process and host that
shares the database; the time is the database's clock read under that lock
(`clock_timestamp()`), so hosts with skewed clocks agree. The update is
domain/rate_limit.py's `take` in SQL: shift the 61 per-second counters to the current
second, subtract a return of unused calls, sum, and grant up to what is left.
tests/integration/test_rate_limit.py runs both on the same request sequences and compares.

`ahora` (the database clock read again for RETURNING, so never before the second was
chosen) lets the caller know how much of that second is left.

Run in autocommit: the statement is its own transaction (no BEGIN/COMMIT round trips).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, text

from loyalty_grpc.domain.rate_limit import SLOTS, Devolucion

_CLOCK = "extract(epoch FROM clock_timestamp())"
_NOW = f"floor({_CLOCK})::bigint"
# :segundo is None in production (the database clock); tests pass a second to replay a
# sequence deterministically. :dev_segundo/:dev are the return (NULL/0: none).
_RESERVE = text(f"""
INSERT INTO limite_llamadas AS l (clave_id, segundo, cuentas, concedidas)
VALUES (:clave_id, coalesce(CAST(:segundo AS bigint), {_NOW}),
        array_fill(0, ARRAY[{SLOTS - 1}]) || least(:pedidas, :limite),
        least(:pedidas, :limite))
ON CONFLICT (clave_id) DO UPDATE SET (segundo, cuentas, concedidas) = (
  SELECT v.segundo,
         v.cuentas[1:{SLOTS - 1}] || (v.cuentas[{SLOTS}] + v.concedidas),
         v.concedidas
  FROM (
    SELECT d.segundo, d.cuentas,
           greatest(0, least(:pedidas, :limite - (SELECT sum(c) FROM unnest(d.cuentas) AS c)))
             AS concedidas
    FROM (
      SELECT w.segundo,
             CASE WHEN CAST(:dev_segundo AS bigint) IS NULL THEN w.cuentas
                  ELSE ARRAY(SELECT u.c - CASE WHEN u.i = {SLOTS} - (w.segundo - :dev_segundo)
                                               THEN least(:dev, u.c) ELSE 0 END
                             FROM unnest(w.cuentas) WITH ORDINALITY AS u(c, i)
                             ORDER BY u.i)
             END AS cuentas
      FROM (
        SELECT s.segundo,
               CASE WHEN s.segundo - l.segundo >= {SLOTS} THEN array_fill(0, ARRAY[{SLOTS}])
                    ELSE l.cuentas[(s.segundo - l.segundo)::int + 1 : {SLOTS}]
                         || array_fill(0, ARRAY[(s.segundo - l.segundo)::int])
               END AS cuentas
        FROM (SELECT greatest(l.segundo, coalesce(CAST(:segundo AS bigint), {_NOW}))
                     AS segundo) AS s
      ) AS w
    ) AS d
  ) AS v
)
RETURNING segundo, cuentas, concedidas,
          coalesce(CAST(:segundo AS double precision), {_CLOCK}) AS ahora
""")  # noqa: S608 (only constants are interpolated)

_PURGE = text(f"DELETE FROM limite_llamadas WHERE segundo < {_NOW} - {SLOTS}")  # noqa: S608


@dataclass(frozen=True)
class Reserva:
    """What the database granted: `concedidas` calls counted in second `segundo`, the
    key's counters after it, and the database clock (epoch seconds) just after."""

    segundo: int
    cuentas: tuple[int, ...]
    concedidas: int
    ahora: float


class PgCounters:
    """The counters of every key, in the database of `engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")

    def reserve(self, clave_id: int, pedidas: int, limite: int,
                devolucion: Devolucion | None = None, *, segundo: int | None = None
                ) -> Reserva:
        """Ask for `pedidas` calls of the key (returning unused ones); see the module doc."""
        with self._engine.connect() as conn:
            row = conn.execute(_RESERVE, {
                "clave_id": clave_id, "pedidas": pedidas, "limite": limite,
                "segundo": segundo,
                "dev_segundo": devolucion.segundo if devolucion else None,
                "dev": devolucion.cuantas if devolucion else 0,
            }).one()
        return Reserva(row.segundo, tuple(row.cuentas), row.concedidas, float(row.ahora))

    def purge(self) -> None:
        """Delete the rows of keys idle for more than a window (they hold only zeros)."""
        with self._engine.connect() as conn:
            conn.execute(_PURGE)
