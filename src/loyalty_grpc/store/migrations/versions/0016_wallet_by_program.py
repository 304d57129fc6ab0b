"""The wallet sender by program, and "which balance is newer" by a per-fan counter.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

Expand: new columns, a trigger, an index and two functions; the previous version keeps
working (its sender folds and records by outbox id, as before).

- `fans.saldo_version` (bigint, NOT NULL DEFAULT 0): bumped by the `fans_cambio` trigger
  whenever `puntos` changes (`NEW.saldo_version := OLD.saldo_version + 1`; the trigger
  already runs on every fans UPDATE and holds the row lock). For one fan it follows the
  order of its balance changes on any node and across shard moves, where outbox ids from
  a distributed sequence may go backwards (another node's range). 0020 replaces the
  trigger function again with the same line.
- `wallet_outbox.version` (bigint, nullable: rows written before this revision have none
  and count as 0): the fan's `saldo_version` after the change, filled by the BEFORE
  INSERT trigger `wallet_outbox_version` when the insert does not give it (`WHEN
  (NEW.version IS NULL)`); the row is written after the balance UPDATE in the same
  transaction, so it is that change's version. Named after `wallet_outbox_programa`
  (0012), which fills `programa_id` for the previous version first (triggers fire in name
  order).
- `wallet_pases.saldo_version` (bigint, nullable): the version of `saldo_pendiente`, beside
  `saldo_id` (kept for the previous version). A fold replaces a balance only with a
  higher (version, outbox id), the outbox id breaking ties only between rows written
  before this revision (version 0); a record settles a balance only if (version, id) is
  still the one attempted.
- `ix_wallet_pases_programa_due (programa_id, proximo_intento, pendiente_desde) WHERE
  pendiente_desde IS NOT NULL`: one program's claim is one index range.
  `ix_wallet_pases_due` and `ix_wallet_outbox_id` stay: the previous version's claim and
  ingest (every program at once) use them; a contract revision drops them later.
- `loyalty_wallet_turno(p_programa, p_filas, p_fans, p_due, p_now, p_lease_until)`: one
  program's turn of a sender run, in one call: fold up to p_filas of the program's oldest
  outbox rows (by id, `FOR UPDATE SKIP LOCKED`: the DELETE is a top-level DELETE CTE,
  router-planned on Citus, aggregated per fan; then `INSERT … SELECT … FROM unnest …
  ON CONFLICT DO UPDATE`, rows in fan order), then claim up to p_fans due fans
  (`FOR UPDATE SKIP LOCKED` on the new index, leased until p_lease_until). First row:
  `filas`, the outbox rows taken, and `plegados`, the fans whose balance changed (the
  other columns NULL); then one row per fan claimed.
  A program with nothing waiting costs two index probes in one call.
- `loyalty_wallet_record(p_programa, …arrays…, p_lease_until, p_due, p_at)`: record the
  outcomes of one program's claimed fans where the lease is still ours, locking the rows
  in fan order first; returns the fans recorded.

Both run with `plan_cache_mode = force_custom_plan` (a plan cached while the outbox was
empty must never serve a large backlog), and `#variable_conflict use_column`. On a Citus
coordinator store/distribution.py distributes them by `p_programa`, co-located with
`fans`, so that a call runs on the node of the program's shard; store/wallet.py calls
them as `SELECT * FROM f(…)` in autocommit (no `force_delegation` needed).

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 0012's trigger function (with `cambio_seq`, still there until 0020), restored on downgrade.
FANS_CAMBIO_0012 = """
CREATE OR REPLACE FUNCTION fans_cambio() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.cambio_xid := pg_current_xact_id()::text::bigint;
    ELSIF (NEW.fan_id, NEW.nombre, NEW.correo, NEW.socio_desde, NEW.puntos, NEW.estado,
           NEW.baja_en, NEW.baja_motivo)
          IS DISTINCT FROM
          (OLD.fan_id, OLD.nombre, OLD.correo, OLD.socio_desde, OLD.puntos, OLD.estado,
           OLD.baja_en, OLD.baja_motivo)
    THEN
        NEW.actualizado := clock_timestamp();
        NEW.cambio_xid := pg_current_xact_id()::text::bigint;
        NEW.cambio_seq := nextval('fans_cambio_seq');
    END IF;
    RETURN NEW;
END
$$
"""

# The same, bumping `saldo_version` when the balance changes.
FANS_CAMBIO = """
CREATE OR REPLACE FUNCTION fans_cambio() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.cambio_xid := pg_current_xact_id()::text::bigint;
    ELSIF (NEW.fan_id, NEW.nombre, NEW.correo, NEW.socio_desde, NEW.puntos, NEW.estado,
           NEW.baja_en, NEW.baja_motivo)
          IS DISTINCT FROM
          (OLD.fan_id, OLD.nombre, OLD.correo, OLD.socio_desde, OLD.puntos, OLD.estado,
           OLD.baja_en, OLD.baja_motivo)
    THEN
        NEW.actualizado := clock_timestamp();
        NEW.cambio_xid := pg_current_xact_id()::text::bigint;
        NEW.cambio_seq := nextval('fans_cambio_seq');
        IF NEW.puntos IS DISTINCT FROM OLD.puntos THEN
            NEW.saldo_version := OLD.saldo_version + 1;
        END IF;
    END IF;
    RETURN NEW;
END
$$
"""

OUTBOX_VERSION = """
CREATE FUNCTION wallet_outbox_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT f.saldo_version INTO NEW.version FROM fans f
    WHERE f.programa_id = NEW.programa_id AND f.pk = NEW.fan_pk;
    RETURN NEW;
END
$$
"""

TURNO = """
CREATE FUNCTION loyalty_wallet_turno(
    p_programa text, p_filas integer, p_fans integer, p_due timestamptz,
    p_now timestamptz, p_lease_until timestamptz
) RETURNS TABLE (
    filas bigint, plegados bigint, fan_pk bigint, saldo_pendiente bigint, saldo_id bigint,
    saldo_version bigint, intentos integer, pendiente_desde timestamptz, fan_id text
)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    tomadas bigint := 0;
    pks bigint[];
    saldos bigint[];
    ids bigint[];
    versiones bigint[];
    desdes timestamptz[];
    elegidos bigint[];
BEGIN
    IF p_filas > 0 THEN
        WITH t AS (
            DELETE FROM wallet_outbox o
            WHERE o.programa_id = p_programa AND o.id = ANY (ARRAY(
                SELECT o2.id FROM wallet_outbox o2 WHERE o2.programa_id = p_programa
                ORDER BY o2.id LIMIT p_filas FOR UPDATE SKIP LOCKED))
            RETURNING o.fan_pk, o.id, o.saldo, coalesce(o.version, 0) AS version, o.creado
        )
        SELECT coalesce(sum(u.n), 0), array_agg(u.fan_pk ORDER BY u.fan_pk),
               array_agg(u.saldo ORDER BY u.fan_pk), array_agg(u.id ORDER BY u.fan_pk),
               array_agg(u.version ORDER BY u.fan_pk), array_agg(u.desde ORDER BY u.fan_pk)
        INTO tomadas, pks, saldos, ids, versiones, desdes
        FROM (
            SELECT t.fan_pk, count(*) AS n,
                   (array_agg(t.saldo ORDER BY t.version DESC, t.id DESC))[1] AS saldo,
                   (array_agg(t.id ORDER BY t.version DESC, t.id DESC))[1] AS id,
                   max(t.version) AS version, min(t.creado) AS desde
            FROM t GROUP BY t.fan_pk
        ) u;
        IF tomadas > 0 THEN
            INSERT INTO wallet_pases AS p (programa_id, fan_pk, saldo_pendiente, saldo_id,
                                           saldo_version, pendiente_desde, proximo_intento)
            SELECT p_programa, n.fan_pk, n.saldo, n.id, n.version, n.desde, p_due
            FROM unnest(pks, saldos, ids, versiones, desdes)
                AS n(fan_pk, saldo, id, version, desde)
            ORDER BY n.fan_pk
            ON CONFLICT (programa_id, fan_pk) DO UPDATE
                SET saldo_pendiente = excluded.saldo_pendiente,
                    saldo_id = excluded.saldo_id,
                    saldo_version = excluded.saldo_version,
                    pendiente_desde = least(p.pendiente_desde, excluded.pendiente_desde)
                WHERE p.saldo_id IS NULL
                   OR (coalesce(p.saldo_version, 0), p.saldo_id)
                      < (excluded.saldo_version, excluded.saldo_id);
            GET DIAGNOSTICS plegados = ROW_COUNT;
        END IF;
    END IF;
    filas := tomadas;
    plegados := coalesce(plegados, 0);
    RETURN NEXT;
    filas := NULL;
    plegados := NULL;
    IF p_fans > 0 THEN
        SELECT array_agg(w.fan_pk) INTO elegidos FROM (
            SELECT w2.fan_pk FROM wallet_pases w2
            WHERE w2.programa_id = p_programa AND w2.pendiente_desde IS NOT NULL
              AND w2.proximo_intento <= p_now
            ORDER BY w2.proximo_intento, w2.pendiente_desde
            LIMIT p_fans FOR UPDATE SKIP LOCKED
        ) w;
        IF elegidos IS NOT NULL THEN
            RETURN QUERY
            UPDATE wallet_pases AS p SET proximo_intento = p_lease_until
            FROM fans AS f
            WHERE p.programa_id = p_programa AND p.fan_pk = ANY (elegidos)
              AND f.programa_id = p_programa AND f.pk = ANY (elegidos) AND f.pk = p.fan_pk
            RETURNING NULL::bigint, NULL::bigint, p.fan_pk, p.saldo_pendiente, p.saldo_id,
                      coalesce(p.saldo_version, 0), p.intentos, p.pendiente_desde, f.fan_id;
        END IF;
    END IF;
END
$$
"""

RECORD = """
CREATE FUNCTION loyalty_wallet_record(
    p_programa text, p_fan_pks bigint[], p_saldo_ids bigint[], p_versiones bigint[],
    p_cubiertos boolean[], p_intentos integer[], p_proximos timestamptz[],
    p_entregados bigint[], p_errores text[], p_lease_until timestamptz,
    p_due timestamptz, p_at timestamptz
) RETURNS TABLE (fan_pk bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
DECLARE
    -- A variable, not now() in the CASE: Citus refuses non-IMMUTABLE functions there.
    ahora timestamptz := now();
BEGIN
    PERFORM FROM wallet_pases w
    WHERE w.programa_id = p_programa AND w.fan_pk = ANY (p_fan_pks)
      AND w.proximo_intento = p_lease_until
    ORDER BY w.fan_pk
    FOR UPDATE;
    RETURN QUERY
    UPDATE wallet_pases AS p SET
        intentos = r.intentos,
        proximo_intento = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id
                                    AND coalesce(p.saldo_version, 0) = r.version
                               THEN p_due ELSE r.proximo END,
        saldo_pendiente = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id
                                    AND coalesce(p.saldo_version, 0) = r.version
                               THEN NULL ELSE p.saldo_pendiente END,
        pendiente_desde = CASE WHEN r.cubierto AND p.saldo_id = r.saldo_id
                                    AND coalesce(p.saldo_version, 0) = r.version THEN NULL
                               WHEN r.cubierto THEN ahora ELSE p.pendiente_desde END,
        entregado_saldo = coalesce(r.entregado, p.entregado_saldo),
        entregado_en = CASE WHEN r.entregado IS NULL THEN p.entregado_en ELSE p_at END,
        ultimo_error = coalesce(r.error, p.ultimo_error),
        error_en = CASE WHEN r.error IS NULL THEN p.error_en ELSE p_at END
    FROM unnest(p_fan_pks, p_saldo_ids, p_versiones, p_cubiertos, p_intentos, p_proximos,
                p_entregados, p_errores)
        AS r(fan_pk, saldo_id, version, cubierto, intentos, proximo, entregado, error)
    WHERE p.programa_id = p_programa AND p.fan_pk = ANY (p_fan_pks) AND p.fan_pk = r.fan_pk
      AND p.proximo_intento = p_lease_until
    RETURNING p.fan_pk;
END
$$
"""


def _sql(statement: str) -> None:
    op.execute(sa.text(statement))


def upgrade() -> None:
    # On a Citus coordinator whose tables are already distributed, the new trigger needs
    # this at DDL time (a placeholder setting elsewhere).
    _sql("SELECT set_config('citus.enable_unsafe_triggers', 'on', true)")
    _sql("ALTER TABLE fans ADD COLUMN saldo_version bigint NOT NULL DEFAULT 0")
    _sql("ALTER TABLE wallet_outbox ADD COLUMN version bigint")
    _sql("ALTER TABLE wallet_pases ADD COLUMN saldo_version bigint")
    _sql(FANS_CAMBIO)
    _sql(OUTBOX_VERSION)
    _sql(
        "CREATE TRIGGER wallet_outbox_version BEFORE INSERT ON wallet_outbox FOR EACH ROW "
        "WHEN (NEW.version IS NULL) EXECUTE FUNCTION wallet_outbox_version()"
    )
    _sql(
        "CREATE INDEX ix_wallet_pases_programa_due ON wallet_pases "
        "(programa_id, proximo_intento, pendiente_desde) WHERE pendiente_desde IS NOT NULL"
    )
    _sql(TURNO)
    _sql(RECORD)


def downgrade() -> None:
    _sql(
        "DROP FUNCTION loyalty_wallet_record(text, bigint[], bigint[], bigint[], boolean[], "
        "integer[], timestamptz[], bigint[], text[], timestamptz, timestamptz, timestamptz)"
    )
    _sql(
        "DROP FUNCTION loyalty_wallet_turno(text, integer, integer, timestamptz, timestamptz, "
        "timestamptz)"
    )
    _sql("DROP INDEX ix_wallet_pases_programa_due")
    _sql("DROP TRIGGER wallet_outbox_version ON wallet_outbox")
    _sql("DROP FUNCTION wallet_outbox_version()")
    _sql(FANS_CAMBIO_0012)
    _sql("ALTER TABLE wallet_pases DROP COLUMN saldo_version")
    _sql("ALTER TABLE wallet_outbox DROP COLUMN version")
    _sql("ALTER TABLE fans DROP COLUMN saldo_version")
