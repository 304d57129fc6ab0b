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

Run in autocommit (store/autocommit.py): the statement is its own transaction (no
BEGIN/COMMIT round trips), fixed text prepared by psycopg.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from loyalty_grpc.domain.rate_limit import SLOTS, Devolucion
from loyalty_grpc.store.autocommit import autocommit, fetch_one

_CLOCK = "extract(epoch FROM clock_timestamp())"
_NOW = f"floor({_CLOCK})::bigint"
# :segundo is None in production (the database clock); tests pass a second to replay a
# sequence deterministically. :dev_segundo/:dev are the return (NULL/0: none).
_RESERVE = f"""
INSERT INTO limite_llamadas AS l (clave_id, segundo, cuentas, concedidas)
VALUES (%(clave_id)s, coalesce(CAST(%(segundo)s AS bigint), {_NOW}),
        array_fill(0, ARRAY[{SLOTS - 1}]) || least(%(pedidas)s, %(limite)s),
        least(%(pedidas)s, %(limite)s))
ON CONFLICT (clave_id) DO UPDATE SET (segundo, cuentas, concedidas) = (
  SELECT v.segundo,
         v.cuentas[1:{SLOTS - 1}] || (v.cuentas[{SLOTS}] + v.concedidas),
         v.concedidas
  FROM (
    SELECT d.segundo, d.cuentas,
           greatest(0, least(%(pedidas)s, %(limite)s - (SELECT sum(c) FROM unnest(d.cuentas) AS c)))
             AS concedidas
    FROM (
      SELECT w.segundo,
             CASE WHEN CAST(%(dev_segundo)s AS bigint) IS NULL THEN w.cuentas
                  ELSE ARRAY(SELECT u.c - CASE WHEN u.i = {SLOTS} - (w.segundo - %(dev_segundo)s)
                                               THEN least(%(dev)s, u.c) ELSE 0 END
                             FROM unnest(w.cuentas) WITH ORDINALITY AS u(c, i)
                             ORDER BY u.i)
             END AS cuentas
      FROM (
        SELECT s.segundo,
               CASE WHEN s.segundo - l.segundo >= {SLOTS} THEN array_fill(0, ARRAY[{SLOTS}])
                    ELSE l.cuentas[(s.segundo - l.segundo)::int + 1 : {SLOTS}]
                         || array_fill(0, ARRAY[(s.segundo - l.segundo)::int])
               END AS cuentas
        FROM (SELECT greatest(l.segundo, coalesce(CAST(%(segundo)s AS bigint), {_NOW}))
                     AS segundo) AS s
      ) AS w
    ) AS d
  ) AS v
)
RETURNING segundo, cuentas, concedidas,
          coalesce(CAST(%(segundo)s AS double precision), {_CLOCK}) AS ahora
"""  # noqa: S608 (only constants are interpolated)

_PURGE = f"DELETE FROM limite_llamadas WHERE segundo < {_NOW} - {SLOTS}"  # noqa: S608


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
        self._engine = engine

    def reserve(self, clave_id: int, pedidas: int, limite: int,
                devolucion: Devolucion | None = None, *, segundo: int | None = None
                ) -> Reserva:
        """Ask for `pedidas` calls of the key (returning unused ones); see the module doc."""
        row = fetch_one(self._engine, _RESERVE, {
            "clave_id": clave_id, "pedidas": pedidas, "limite": limite, "segundo": segundo,
            "dev_segundo": devolucion.segundo if devolucion else None,
            "dev": devolucion.cuantas if devolucion else 0,
        })
        assert row is not None  # an upsert's RETURNING always has its row
        segundo_, cuentas, concedidas, ahora = row
        return Reserva(int(segundo_), tuple(cuentas), int(concedidas), float(ahora))

    def purge(self) -> None:
        """Delete the rows of keys idle for more than a window (they hold only zeros)."""
        with autocommit(self._engine) as conn:
            conn.execute(_PURGE)
