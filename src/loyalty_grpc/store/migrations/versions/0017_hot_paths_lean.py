"""The sale's and the single redemption's ledger entry without arrays, the outbox row's
version from the balance UPDATE, the call limit's rows found by their index: the hot
paths' PostgreSQL cost back to before 0014.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28

Expand: one new function, `CREATE OR REPLACE` of three with the same signatures and
results, a setting on two; nothing else. The previous version never calls any of them.

- `loyalty_move1(p_programa, p_fan_pk, p_puntos, p_venta_id, p_codigo_id, p_motivo,
  p_nota)`: the ledger rule for ONE fan and one entry, the only text of it: 0 points or
  no such fan in the program → nothing, NULL; else the fan's balance UPDATE (which takes
  the row lock), its ledger row and its wallet outbox row, and the new balance returned.
  The outbox row gets its `version` from the UPDATE's `RETURNING saldo_version` (the
  `fans_cambio` trigger bumped it), so the BEFORE INSERT trigger `wallet_outbox_version`
  (0016), whose `WHEN (NEW.version IS NULL)` is then false, does not read the fan again.
  The trigger stays for the writers that leave `version` out: the previous version's
  sale, ledger and redemption statements during an upgrade (docs/deployment.md), SQL
  written for the schema before 0012 (the reference benchmark's pgbench sale).
- `loyalty_move`: its one-fan case is `loyalty_move1`; several fans as before, the outbox
  rows now with the version of their UPDATE too.
- `loyalty_tx`: the sale's points through `loyalty_move1`, a scalar call (0014 called
  `loyalty_move` as a set-returning function with four one-element arrays: arrays built,
  a tuplestore, the row read back).
- `loyalty_redeem`: the single form credits its copy through `loyalty_move1`; a batch
  through `loyalty_move`, as before.
- `loyalty_limit_reserve` and `loyalty_limit_settle` (0015) run with `enable_seqscan =
  off` (`ALTER FUNCTION … SET`): `limite_llamadas` holds one row per key, so small that
  the planner reads it whole (the plan cached for the session) rather than through its
  key's index, and its rows are updated on every request: under a concurrent load (any
  open snapshot) their old versions stay, and every request read all of them, twice (the
  lock, the UPDATE) — 2.2–2.8 times the CPU of the previous version's upsert, whose conflict
  check always goes through the index. With the setting both go by the key's index;
  the request stays 0015's steps (lock, clock, update: 0015 says why), measured as cheap
  as the upsert once its rows are found by the index.

Measured with bench/hot_sql_cpu.py (docs/performance.md). On a Citus coordinator
store/distribution.py registers `loyalty_move1` with the others: it runs inside the
delegated calls on the node of the program's shard.

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MOVE1 = """
CREATE FUNCTION loyalty_move1(
    p_programa text, p_fan_pk bigint, p_puntos bigint, p_venta_id integer,
    p_codigo_id bigint, p_motivo text, p_nota text
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    nuevo bigint;
    v_version bigint;
BEGIN
    IF p_puntos = 0 THEN
        RETURN NULL;
    END IF;
    UPDATE fans f SET puntos = f.puntos + p_puntos
    WHERE f.programa_id = p_programa AND f.pk = p_fan_pk
    RETURNING f.puntos, f.saldo_version INTO nuevo, v_version;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, venta_id, codigo_id, nota)
    VALUES (p_programa, p_fan_pk, p_puntos, p_motivo, p_venta_id, p_codigo_id, p_nota);
    INSERT INTO wallet_outbox (programa_id, fan_pk, saldo, version)
    VALUES (p_programa, p_fan_pk, nuevo, v_version);
    RETURN nuevo;
END
$$
"""

MOVE = """
CREATE OR REPLACE FUNCTION loyalty_move(
    p_programa text, p_fan_pks bigint[], p_puntos bigint[], p_venta_ids integer[],
    p_codigo_ids bigint[], p_motivo text, p_nota text
) RETURNS TABLE (fan_pk bigint, saldo bigint)
LANGUAGE plpgsql AS $$
DECLARE
    uno bigint;
    v_version bigint;
BEGIN
    IF cardinality(p_fan_pks) = 1 THEN
        saldo := loyalty_move1(p_programa, p_fan_pks[1], p_puntos[1], p_venta_ids[1],
                               p_codigo_ids[1], p_motivo, p_nota);
        IF saldo IS NOT NULL THEN
            fan_pk := p_fan_pks[1];
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    SELECT min(m.fan_pk) INTO uno FROM unnest(p_fan_pks, p_puntos) AS m(fan_pk, puntos)
    WHERE m.puntos <> 0
    HAVING count(DISTINCT m.fan_pk) > 1;
    IF uno IS NOT NULL THEN
        PERFORM FROM fans f
        WHERE f.programa_id = p_programa
          AND f.pk = ANY(ARRAY(SELECT m.fan_pk FROM unnest(p_fan_pks, p_puntos)
                                 AS m(fan_pk, puntos) WHERE m.puntos <> 0))
        ORDER BY f.pk FOR NO KEY UPDATE;
    END IF;
    FOR fan_pk, saldo, v_version IN
        UPDATE fans f SET puntos = f.puntos + s.puntos
        FROM (SELECT m.fan_pk, CAST(sum(m.puntos) AS bigint) AS puntos
              FROM unnest(p_fan_pks, p_puntos) AS m(fan_pk, puntos)
              WHERE m.puntos <> 0 GROUP BY m.fan_pk) AS s
        WHERE f.programa_id = p_programa AND f.pk = s.fan_pk
        RETURNING f.pk, f.puntos, f.saldo_version
    LOOP
        INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, venta_id, codigo_id, nota)
        SELECT p_programa, m.fan_pk, m.puntos, p_motivo, m.venta_id, m.codigo_id, p_nota
        FROM unnest(p_fan_pks, p_puntos, p_venta_ids, p_codigo_ids)
             AS m(fan_pk, puntos, venta_id, codigo_id)
        WHERE m.fan_pk = loyalty_move.fan_pk AND m.puntos <> 0;
        INSERT INTO wallet_outbox (programa_id, fan_pk, saldo, version)
        VALUES (p_programa, loyalty_move.fan_pk, loyalty_move.saldo, v_version);
        RETURN NEXT;
    END LOOP;
END
$$
"""

TX = """
CREATE OR REPLACE FUNCTION loyalty_tx(
    p_programa text, p_forma text, p_valor text, p_crudo text, p_folio integer,
    p_modo text, p_id_externo text, p_centavos bigint, p_moneda text, p_terminal text,
    p_sitio text, p_ts timestamptz, p_puntos bigint, p_clave_id bigint
) RETURNS TABLE (
    fan_pk bigint, fan_id text, correo text, puntos bigint, folio integer, saldo bigint
)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_forma = 'qr_url' THEN
        SELECT f.pk, f.fan_id, f.correo, f.puntos INTO fan_pk, fan_id, correo, puntos
        FROM fans f
        WHERE f.programa_id = p_programa AND f.estado = 'activo' AND f.qr_token = p_valor;
    ELSIF p_forma = 'correo' THEN
        SELECT f.pk, f.fan_id, f.correo, f.puntos INTO fan_pk, fan_id, correo, puntos
        FROM fans f
        WHERE f.programa_id = p_programa AND f.estado = 'activo'
          AND lower(f.correo COLLATE "C") = p_valor;
    ELSE
        SELECT l.pk, l.fan_id, l.correo, l.puntos INTO fan_pk, fan_id, correo, puntos
        FROM (
          SELECT f.pk, f.fan_id, f.correo, f.puntos, NULL::bigint AS via_codigo,
                 1 AS prio, 0 AS orden
            FROM fans f
            WHERE f.programa_id = p_programa AND f.estado = 'activo' AND f.fan_id = p_valor
          UNION ALL
          SELECT f.pk, f.fan_id, f.correo, f.puntos, c.id, 2,
                 CASE WHEN c.estado = 'asignado' THEN 0 ELSE 1 END
            FROM codigos c JOIN fans f ON f.programa_id = c.programa_id AND f.pk = c.fan_pk
            WHERE c.programa_id = p_programa AND c.codigo = p_valor
              AND c.estado IN ('asignado', 'canjeado')
              AND f.programa_id = p_programa AND f.estado = 'activo'
          UNION ALL
          SELECT f.pk, f.fan_id, f.correo, f.puntos, NULL::bigint, 3, 0
            FROM fans f
            WHERE f.programa_id = p_programa AND f.estado = 'activo' AND f.qr_token = p_crudo
        ) AS l
        ORDER BY l.prio, l.orden, l.via_codigo
        LIMIT 1;
    END IF;
    IF fan_pk IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO ventas (id, programa_id, modo, id_externo, fan_pk, importe_centavos, moneda,
                        terminal, sitio, ts, puntos, clave_id)
    VALUES (p_folio, p_programa, p_modo, p_id_externo, fan_pk, p_centavos, p_moneda,
            p_terminal, p_sitio, p_ts, p_puntos, p_clave_id)
    ON CONFLICT (programa_id, modo, id_externo) DO NOTHING
    RETURNING id INTO folio;
    IF folio IS NOT NULL AND p_puntos <> 0 THEN
        saldo := loyalty_move1(p_programa, fan_pk, p_puntos, folio, NULL, 'venta', '');
    END IF;
    RETURN NEXT;
END
$$
"""

REDEEM = """
CREATE OR REPLACE FUNCTION loyalty_redeem(
    p_programa text, p_codigo text, p_ids bigint[], p_preferencia text[],
    p_ts timestamptz, p_terminal text, p_clave_id bigint, p_ahora timestamptz,
    p_vivo boolean
) RETURNS TABLE (
    copia bigint, estado text, promo text, puntos_canje integer, correo text,
    credited integer
)
LANGUAGE plpgsql AS $$
DECLARE
    fans_q bigint[] := '{}';
    puntos_q bigint[] := '{}';
    codigos_q bigint[] := '{}';
    r record;
    elegida record;
    rango integer;
    mejor integer;
BEGIN
    IF p_codigo IS NOT NULL THEN
        -- every copy of the text, locked in id order (as every redemption locks), read as
        -- the locks return them; the preferred state wins, then the oldest
        FOR r IN
            SELECT c.id, c.estado, c.fan_pk, p.nombre, p.puntos_canje, f.correo
            FROM codigos c
            JOIN promos p ON p.programa_id = c.programa_id AND p.id = c.promo_id
            LEFT JOIN fans f ON f.programa_id = c.programa_id AND f.pk = c.fan_pk
            WHERE c.programa_id = p_programa AND c.codigo = p_codigo
              AND p.programa_id = p_programa
            ORDER BY c.id
            FOR NO KEY UPDATE OF c
        LOOP
            rango := coalesce(array_position(p_preferencia, r.estado), 2147483647);
            IF mejor IS NULL OR rango < mejor THEN
                mejor := rango;
                elegida := r;
            END IF;
        END LOOP;
        IF mejor IS NULL THEN
            RETURN;
        END IF;
        copia := elegida.id;
        estado := elegida.estado;
        promo := elegida.nombre;
        puntos_canje := elegida.puntos_canje;
        correo := elegida.correo;
        credited := CASE WHEN p_vivo AND elegida.estado = 'asignado'
                         THEN elegida.puntos_canje ELSE 0 END;
        RETURN NEXT;
        IF elegida.estado <> 'asignado' THEN
            RETURN;
        END IF;
        UPDATE codigos c SET estado = 'canjeado', canjeado_en = p_ts,
               canje_terminal = p_terminal, canje_clave_id = p_clave_id,
               canje_registrado = p_ahora
        WHERE c.programa_id = p_programa AND c.id = elegida.id;
        PERFORM loyalty_move1(p_programa, elegida.fan_pk, CAST(credited AS bigint), NULL,
                              elegida.id, 'canje', '');
        RETURN;
    ELSE
        -- a batch's copies, locked by the caller (store/redeem.lock_copies)
        FOR r IN
            SELECT c.id, c.estado, c.fan_pk, p.nombre, p.puntos_canje, f.correo
            FROM codigos c
            JOIN promos p ON p.programa_id = c.programa_id AND p.id = c.promo_id
            LEFT JOIN fans f ON f.programa_id = c.programa_id AND f.pk = c.fan_pk
            WHERE c.programa_id = p_programa AND c.id = ANY(p_ids)
              AND p.programa_id = p_programa
            ORDER BY c.id
        LOOP
            copia := r.id;
            estado := r.estado;
            promo := r.nombre;
            puntos_canje := r.puntos_canje;
            correo := r.correo;
            credited := CASE WHEN p_vivo AND r.estado = 'asignado'
                             THEN r.puntos_canje ELSE 0 END;
            IF r.estado = 'asignado' THEN
                fans_q := fans_q || r.fan_pk;
                puntos_q := puntos_q || CAST(credited AS bigint);
                codigos_q := codigos_q || r.id;
            END IF;
            RETURN NEXT;
        END LOOP;
        IF cardinality(codigos_q) = 0 THEN
            RETURN;
        END IF;
    END IF;
    UPDATE codigos c SET estado = 'canjeado', canjeado_en = p_ts,
           canje_terminal = p_terminal, canje_clave_id = p_clave_id,
           canje_registrado = p_ahora
    WHERE c.programa_id = p_programa AND c.id = ANY(codigos_q);
    PERFORM FROM loyalty_move(p_programa, fans_q, puntos_q,
                              array_fill(NULL::integer, ARRAY[cardinality(fans_q)]),
                              codigos_q, 'canje', '');
END
$$
"""


def _0014(name: str) -> str:
    """0014's text of a function, to put back on downgrade."""
    m = importlib.import_module("loyalty_grpc.store.migrations.versions.0014_hot_paths")
    text: str = getattr(m, name)
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


RESERVE = (
    "loyalty_limit_reserve(text, bigint, integer, integer, integer, bigint, bigint, integer, "
    "integer)"
)
SETTLE = "loyalty_limit_settle(text, bigint[], bigint[], integer[], integer[])"


def upgrade() -> None:
    op.execute(MOVE1)
    op.execute(MOVE)
    op.execute(TX)
    op.execute(REDEEM)
    op.execute(f"ALTER FUNCTION {RESERVE} SET enable_seqscan = off")
    op.execute(f"ALTER FUNCTION {SETTLE} SET enable_seqscan = off")


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {SETTLE} RESET enable_seqscan")
    op.execute(f"ALTER FUNCTION {RESERVE} RESET enable_seqscan")
    op.execute(_0014("REDEEM"))
    op.execute(_0014("TX"))
    op.execute(_0014("MOVE"))
    op.execute("DROP FUNCTION loyalty_move1(text, bigint, bigint, integer, bigint, text, text)")
