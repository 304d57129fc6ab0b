"""The call limit's request and settlement as function calls, run where the key's row is.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28

Expand: two new functions, nothing else; the previous version never calls them.

- `loyalty_limit_reserve(p_programa, p_clave_id, p_pedidas, p_limite, p_holgura,
  p_segundo, p_dev_segundo, p_dev, p_dev_reservadas)`: domain/rate_limit.py's `take` on
  the key's row of `limite_llamadas`, as the single `INSERT … ON CONFLICT DO UPDATE` of
  revision 0008's code did, in steps: lock the row (`SELECT … FOR UPDATE`), read the clock
  (`clock_timestamp()`, after the lock, as the DO UPDATE did: the second a grant is counted
  in is never before the lock was taken), shift the 61 counters and the 5 counters of
  spare calls to that second (never before the row's `segundo`), settle the earlier batch
  (`p_dev_segundo`, `p_dev`, `p_dev_reservadas`; NULL/0/0: none), grant up to what the
  limit and the slack leave, `UPDATE` the row by its key. No row (the key's first request,
  or after a purge): `INSERT … ON CONFLICT DO NOTHING` the first grant; when a concurrent
  first request inserted it meanwhile, lock that row and go on as above. Returns one row:
  `segundo`, `cuentas`, `reservas`, `concedidas` and `ahora` (the clock read again after the
  update, or `p_segundo` when a test replays a sequence with fixed seconds).
- `loyalty_limit_settle(p_programa, p_claves, p_segundos, p_cuantas, p_reservadas)`:
  `settle` for several keys of ONE program (at most one batch per key): their rows locked
  in key order first (two settlements of the same keys never deadlock; a request locks one
  row only), then one `UPDATE … FROM unnest(…)`. Returns the rows settled. A caller with
  batches of several programs calls it once per program, in program order.

Why functions: on Citus (store/distribution.py registers both with
`create_distributed_function(…, 'p_programa', colocate_with => 'limite_llamadas')`, the
table's own colocation group) a call runs on the node of the key's shard, so the clock
is that node's, one clock per key whatever host the calling process runs on, and the row
lock serialises every process's requests of the key there. Citus refuses the previous
statement (an `INSERT … ON CONFLICT DO UPDATE` with subqueries) and would have locked the
settlement's rows across shards. Each statement of the bodies names the key's program, so
it is a router statement on the shard (executed locally). On PostgreSQL without Citus the
same calls, one round trip each, as before. Both run in autocommit: neither needs
`force_delegation`.

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RESERVE = """
CREATE FUNCTION loyalty_limit_reserve(
    p_programa text, p_clave_id bigint, p_pedidas integer, p_limite integer,
    p_holgura integer, p_segundo bigint, p_dev_segundo bigint, p_dev integer,
    p_dev_reservadas integer)
RETURNS TABLE(segundo bigint, cuentas integer[], reservas integer[], concedidas integer,
              ahora double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_segundo bigint;
    v_cuentas integer[];
    v_reservas integer[];
    v_concedidas integer;
    v_paso bigint;
    v_i integer;
    v_usadas bigint;
    v_pendientes bigint;
BEGIN
    SELECT l.segundo, l.cuentas, l.reservas INTO v_segundo, v_cuentas, v_reservas
    FROM limite_llamadas AS l
    WHERE l.programa_id = p_programa AND l.clave_id = p_clave_id
    FOR UPDATE;
    IF NOT FOUND THEN
        v_segundo := coalesce(p_segundo, floor(extract(epoch FROM clock_timestamp()))::bigint);
        v_concedidas := greatest(0, least(p_pedidas, p_limite, 1 + greatest(0, p_holgura)));
        INSERT INTO limite_llamadas AS l (programa_id, clave_id, segundo, cuentas, reservas,
                                          concedidas)
        VALUES (p_programa, p_clave_id, v_segundo,
                array_fill(0, ARRAY[60]) || v_concedidas,
                array_fill(0, ARRAY[4]) || greatest(0, v_concedidas - 1),
                v_concedidas)
        ON CONFLICT (programa_id, clave_id) DO NOTHING
        RETURNING l.segundo, l.cuentas, l.reservas INTO v_segundo, v_cuentas, v_reservas;
        IF FOUND THEN
            segundo := v_segundo;
            cuentas := v_cuentas;
            reservas := v_reservas;
            concedidas := v_concedidas;
            ahora := coalesce(p_segundo::double precision,
                              extract(epoch FROM clock_timestamp()));
            RETURN NEXT;
            RETURN;
        END IF;
        -- A first request of the same key inserted the row meanwhile: take its lock.
        SELECT l.segundo, l.cuentas, l.reservas INTO v_segundo, v_cuentas, v_reservas
        FROM limite_llamadas AS l
        WHERE l.programa_id = p_programa AND l.clave_id = p_clave_id
        FOR UPDATE;
    END IF;
    -- The second, read under the row's lock, never before the row's.
    v_paso := greatest(v_segundo,
                       coalesce(p_segundo, floor(extract(epoch FROM clock_timestamp()))::bigint))
              - v_segundo;
    v_segundo := v_segundo + v_paso;
    IF v_paso >= 61 THEN
        v_cuentas := array_fill(0, ARRAY[61]);
    ELSIF v_paso > 0 THEN
        v_cuentas := v_cuentas[v_paso::integer + 1 : 61] || array_fill(0, ARRAY[v_paso::integer]);
    END IF;
    IF v_paso >= 5 THEN
        v_reservas := array_fill(0, ARRAY[5]);
    ELSIF v_paso > 0 THEN
        v_reservas := v_reservas[v_paso::integer + 1 : 5]
                      || array_fill(0, ARRAY[v_paso::integer]);
    END IF;
    -- The earlier batch's settlement, in its second's slots if still there.
    v_i := 61 - (v_segundo - p_dev_segundo);
    IF p_dev > 0 AND v_i BETWEEN 1 AND 61 THEN
        v_cuentas[v_i] := v_cuentas[v_i] - least(p_dev, v_cuentas[v_i]);
    END IF;
    v_i := 5 - (v_segundo - p_dev_segundo);
    IF p_dev_reservadas > 0 AND v_i BETWEEN 1 AND 5 THEN
        v_reservas[v_i] := v_reservas[v_i] - least(p_dev_reservadas, v_reservas[v_i]);
    END IF;
    SELECT (SELECT sum(c) FROM unnest(v_cuentas) AS c),
           (SELECT sum(r) FROM unnest(v_reservas) AS r)
    INTO v_usadas, v_pendientes;
    v_concedidas := greatest(0, least(p_pedidas, p_limite - v_usadas,
                                      1 + greatest(0, p_holgura - v_pendientes)));
    v_cuentas[61] := v_cuentas[61] + v_concedidas;
    v_reservas[5] := v_reservas[5] + greatest(0, v_concedidas - 1);
    UPDATE limite_llamadas AS l
    SET segundo = v_segundo, cuentas = v_cuentas, reservas = v_reservas,
        concedidas = v_concedidas
    WHERE l.programa_id = p_programa AND l.clave_id = p_clave_id;
    segundo := v_segundo;
    cuentas := v_cuentas;
    reservas := v_reservas;
    concedidas := v_concedidas;
    ahora := coalesce(p_segundo::double precision, extract(epoch FROM clock_timestamp()));
    RETURN NEXT;
END
$$
"""

SETTLE = """
CREATE FUNCTION loyalty_limit_settle(
    p_programa text, p_claves bigint[], p_segundos bigint[], p_cuantas integer[],
    p_reservadas integer[])
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_filas integer;
BEGIN
    PERFORM FROM limite_llamadas AS b
    WHERE b.programa_id = p_programa AND b.clave_id = ANY (p_claves)
    ORDER BY b.clave_id
    FOR UPDATE;
    UPDATE limite_llamadas AS l
    SET cuentas = CASE WHEN (61 - (l.segundo - x.segundo)) BETWEEN 1 AND 61
                       THEN l.cuentas[1 : (61 - (l.segundo - x.segundo))::int - 1]
                            || (l.cuentas[(61 - (l.segundo - x.segundo))::int]
                                - least(x.cuantas,
                                        l.cuentas[(61 - (l.segundo - x.segundo))::int]))
                            || l.cuentas[(61 - (l.segundo - x.segundo))::int + 1 : 61]
                       ELSE l.cuentas END,
        reservas = CASE WHEN (5 - (l.segundo - x.segundo)) BETWEEN 1 AND 5
                        THEN l.reservas[1 : (5 - (l.segundo - x.segundo))::int - 1]
                             || (l.reservas[(5 - (l.segundo - x.segundo))::int]
                                 - least(x.reservadas,
                                         l.reservas[(5 - (l.segundo - x.segundo))::int]))
                             || l.reservas[(5 - (l.segundo - x.segundo))::int + 1 : 5]
                        ELSE l.reservas END
    FROM unnest(p_claves, p_segundos, p_cuantas, p_reservadas)
         AS x(clave_id, segundo, cuantas, reservadas)
    WHERE l.programa_id = p_programa AND l.clave_id = x.clave_id;
    GET DIAGNOSTICS v_filas = ROW_COUNT;
    RETURN v_filas;
END
$$
"""


def upgrade() -> None:
    op.execute(RESERVE)
    op.execute(SETTLE)


def downgrade() -> None:
    op.execute("DROP FUNCTION loyalty_limit_settle(text, bigint[], bigint[], integer[], integer[])")
    op.execute(
        "DROP FUNCTION loyalty_limit_reserve(text, bigint, integer, integer, integer, bigint, "
        "bigint, integer, integer)"
    )
