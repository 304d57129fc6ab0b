"""The roster page as one function call, read where the program's fans are.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27

Expand: two new functions, nothing else; the previous version never calls them.

- `loyalty_lugar(p_programa)`: the placement identity a roster cursor is bound to. On
  PostgreSQL without Citus (or before `fans` is distributed) the cluster's
  `system_identifier`, the value cursors carried before this revision, so they stay
  valid. On Citus, where `fans` is distributed: a 64-bit hash of the node's
  `system_identifier` and the OID of the program's `fans` shard on this node, or NULL
  when that shard is not placed here (the call was not delegated to the shard's node, or
  the shard has just moved). A shard move creates the shard's table anew on the target
  (a new OID, another node), a move back anew again: every placement has its own value,
  and a cursor counted in another node's transaction ids is refused. One body for both:
  the Citus branch runs only when the extension is installed and `fans` distributed
  (plpgsql resolves a statement's names when it first runs it).
- `loyalty_roster_page(p_programa, p_fase, p_xid, p_pk, p_limite)`: a page's state and
  rows in one statement, hence one snapshot (STABLE: every statement of the body reads
  the calling statement's snapshot, the one `pg_current_snapshot()` describes). The
  first row is the state (horizon, newest change below the snapshot's xmax, `lugar`,
  whether the cursor (p_fase, p_xid, p_pk) was issued under that `lugar`); the page's
  fans follow (at most p_limite + 1, in feed order), unless `lugar` is NULL or the
  cursor was not issued there. A snapshot page (p_fase NULL or 1) pages fans by pk after
  p_pk; a page of changes (p_fase 2) serves positions after (p_xid, p_pk) below the
  horizon. services/pos/roster.py says why; store/roster.py calls it as
  `SELECT * FROM loyalty_roster_page(…)` (Citus delegates only that form of call), and
  store/distribution.py registers it on a Citus coordinator with
  `create_distributed_function(…, 'p_programa', colocate_with => 'fans')`, so that it
  runs on the node of the program's shard: the transaction ids it compares are that
  node's, those the `fans_cambio` trigger stamps there.

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LUGAR = """
CREATE FUNCTION loyalty_lugar(p_programa text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    sistema bigint := (SELECT c.system_identifier FROM pg_control_system() c);
    shard bigint;
    relacion regclass;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension e WHERE e.extname = 'citus') THEN
        RETURN sistema;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_dist_partition d
                   WHERE d.logicalrelid = 'fans'::regclass AND d.partmethod = 'h') THEN
        RETURN sistema;
    END IF;
    shard := get_shard_id_for_distribution_column('fans', p_programa);
    IF NOT EXISTS (SELECT FROM pg_dist_placement p
                   WHERE p.shardid = shard
                     AND p.groupid = (SELECT g.groupid FROM pg_dist_local_group g)) THEN
        RETURN NULL;
    END IF;
    relacion := to_regclass(shard_name('fans'::regclass, shard));
    IF relacion IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN hashtextextended(sistema::text || '/' || relacion::oid::text, 27);
END
$$
"""

PAGE = """
CREATE FUNCTION loyalty_roster_page(
    p_programa text, p_fase integer, p_xid bigint, p_pk bigint, p_limite integer
) RETURNS TABLE (
    horizon bigint, newest_change bigint, lugar bigint, emitido boolean,
    pk bigint, cambio_xid bigint, fan_id text, nombre text, correo text,
    socio_desde integer, puntos bigint, estado text, baja_en timestamptz,
    baja_motivo text, actualizado timestamptz
)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    s pg_snapshot := pg_current_snapshot();
    h bigint := pg_snapshot_xmin(s)::text::bigint;
BEGIN
    horizon := h;
    lugar := loyalty_lugar(p_programa);
    SELECT max(f.cambio_xid) INTO newest_change FROM fans f
    WHERE f.programa_id = p_programa AND f.cambio_xid < pg_snapshot_xmax(s)::text::bigint;
    emitido := EXISTS (
        SELECT FROM roster_cursores r
        WHERE r.programa_id = p_programa AND r.sistema = lugar AND r.fase = p_fase
          AND r.xid = p_xid AND r.pk = p_pk);
    RETURN NEXT;
    IF lugar IS NULL OR (p_fase IS NOT NULL AND NOT emitido) THEN
        RETURN;
    END IF;
    IF p_fase IS NULL OR p_fase = 1 THEN
        RETURN QUERY
        SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::boolean,
               f.pk, f.cambio_xid, f.fan_id, f.nombre, f.correo, f.socio_desde,
               f.puntos, f.estado, f.baja_en, f.baja_motivo, f.actualizado
        FROM fans f
        WHERE f.programa_id = p_programa AND f.pk > coalesce(p_pk, 0)
        ORDER BY f.pk
        LIMIT p_limite + 1;
    ELSE
        RETURN QUERY
        SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::boolean,
               f.pk, f.cambio_xid, f.fan_id, f.nombre, f.correo, f.socio_desde,
               f.puntos, f.estado, f.baja_en, f.baja_motivo, f.actualizado
        FROM fans f
        WHERE f.programa_id = p_programa AND (f.cambio_xid, f.pk) > (p_xid, p_pk)
          AND f.cambio_xid < h
        ORDER BY f.cambio_xid, f.pk
        LIMIT p_limite + 1;
    END IF;
END
$$
"""


def upgrade() -> None:
    op.execute(LUGAR)
    op.execute(PAGE)


def downgrade() -> None:
    op.execute("DROP FUNCTION loyalty_roster_page(text, integer, bigint, bigint, integer)")
    op.execute("DROP FUNCTION loyalty_lugar(text)")
