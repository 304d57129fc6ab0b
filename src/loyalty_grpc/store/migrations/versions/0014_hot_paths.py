"""The hot writes as functions of simple statements: the ledger rule, the sale, a
redemption (both forms) and the codes deposit.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

Expand: four new functions, nothing else; the previous version never calls them.

Why functions: on Citus a statement with an INSERT in a CTE (today's sale, redemption and
ledger rule were such single statements) is never router-planned; it runs as several
sub-plans through the coordinator with intermediate results sent to every worker and a
two-phase commit (about 4 times slower), and the redemptions failed outright. A plpgsql
function of simple statements, each naming one program's rows, is delegated by Citus to
the node of the program's shard (store/distribution.py registers them) and runs there in
one round trip; on PostgreSQL without Citus it is one round trip too, and measured no
slower than the CTE statement (docs/citus.md).

- `loyalty_move(p_programa, p_fan_pks, p_puntos, p_venta_ids, p_codigo_ids, p_motivo,
  p_nota)`: the ledger rule, the only place points move. Entries (parallel arrays) with 0
  points are ignored; each fan's entries change its balance once (one outbox row), one
  ledger row per entry, written after the balance UPDATE; a fan that does not exist in
  the program writes nothing. Returns (fan_pk, saldo) of each fan that moved. Several
  fans: their rows are locked first, in pk order (every multi-fan writer's order: no
  deadlock between two). One fan: the UPDATE takes the lock itself and nothing else
  (store/ledger.py says why).
- `loyalty_tx(…)`: the sale. The fan by the form of `fan` (store/fan_lookup.py: qr_url,
  correo, texto), none → no row; the sale under the folio passed in, `ON CONFLICT DO
  NOTHING` on (program, mode, id_externo) (a concurrent identical sale waits here and then
  inserts nothing); its points through `loyalty_move`. One row: the fan, its balance
  before, the new folio (NULL for a known id_externo) and the new balance (NULL when
  nothing moved).
- `loyalty_redeem(…)`: a redemption, both forms (store/redeem.py): `p_codigo` (the single
  form: every copy of the text locked in id order and read with its promotion and fan in
  one statement, the preferred one chosen) or `p_ids` (a batch: copies the caller
  locked). Redeems those `asignado`, credits them through `loyalty_move` (codes first,
  then fans), returns each chosen copy as it was.
- `loyalty_codes_deposit(p_programa, p_promo_id, p_codes)`: the codes a promotion lacks,
  `disponible`, in code order; how many went in.

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MOVE = """
CREATE FUNCTION loyalty_move(
    p_programa text, p_fan_pks bigint[], p_puntos bigint[], p_venta_ids integer[],
    p_codigo_ids bigint[], p_motivo text, p_nota text
) RETURNS TABLE (fan_pk bigint, saldo bigint)
LANGUAGE plpgsql AS $$
DECLARE
    uno bigint;
    nuevo bigint;
BEGIN
    IF cardinality(p_fan_pks) = 1 THEN
        IF p_puntos[1] = 0 THEN
            RETURN;
        END IF;
        UPDATE fans f SET puntos = f.puntos + p_puntos[1]
        WHERE f.programa_id = p_programa AND f.pk = p_fan_pks[1]
        RETURNING f.puntos INTO nuevo;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, venta_id, codigo_id, nota)
        VALUES (p_programa, p_fan_pks[1], p_puntos[1], p_motivo, p_venta_ids[1],
                p_codigo_ids[1], p_nota);
        INSERT INTO wallet_outbox (programa_id, fan_pk, saldo)
        VALUES (p_programa, p_fan_pks[1], nuevo);
        fan_pk := p_fan_pks[1];
        saldo := nuevo;
        RETURN NEXT;
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
    FOR fan_pk, saldo IN
        UPDATE fans f SET puntos = f.puntos + s.puntos
        FROM (SELECT m.fan_pk, CAST(sum(m.puntos) AS bigint) AS puntos
              FROM unnest(p_fan_pks, p_puntos) AS m(fan_pk, puntos)
              WHERE m.puntos <> 0 GROUP BY m.fan_pk) AS s
        WHERE f.programa_id = p_programa AND f.pk = s.fan_pk
        RETURNING f.pk, f.puntos
    LOOP
        INSERT INTO movimientos (programa_id, fan_pk, puntos, motivo, venta_id, codigo_id, nota)
        SELECT p_programa, m.fan_pk, m.puntos, p_motivo, m.venta_id, m.codigo_id, p_nota
        FROM unnest(p_fan_pks, p_puntos, p_venta_ids, p_codigo_ids)
             AS m(fan_pk, puntos, venta_id, codigo_id)
        WHERE m.fan_pk = loyalty_move.fan_pk AND m.puntos <> 0;
        INSERT INTO wallet_outbox (programa_id, fan_pk, saldo)
        VALUES (p_programa, loyalty_move.fan_pk, loyalty_move.saldo);
        RETURN NEXT;
    END LOOP;
END
$$
"""

TX = """
CREATE FUNCTION loyalty_tx(
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
        SELECT m.saldo INTO saldo
        FROM loyalty_move(p_programa, ARRAY[fan_pk], ARRAY[p_puntos], ARRAY[folio],
                          ARRAY[NULL::bigint], 'venta', '') AS m;
    END IF;
    RETURN NEXT;
END
$$
"""

REDEEM = """
CREATE FUNCTION loyalty_redeem(
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
        fans_q := ARRAY[elegida.fan_pk];
        puntos_q := ARRAY[CAST(credited AS bigint)];
        codigos_q := ARRAY[elegida.id];
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


DEPOSIT = """
CREATE FUNCTION loyalty_codes_deposit(p_programa text, p_promo_id integer, p_codes text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    r record;
BEGIN
    -- counted off RETURNING, the rows that went in: on Citus an INSERT … SELECT of an
    -- array is inserted through an intermediate result, whose ROW_COUNT is the rows
    -- offered, conflicts included
    FOR r IN
        INSERT INTO codigos (promo_id, programa_id, codigo, estado)
        SELECT p_promo_id, p_programa, c.codigo, 'disponible'
        FROM unnest(p_codes) AS c(codigo)
        ORDER BY c.codigo
        ON CONFLICT (programa_id, promo_id, codigo) DO NOTHING
        RETURNING 1
    LOOP
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$
"""


def upgrade() -> None:
    op.execute(MOVE)
    op.execute(TX)
    op.execute(REDEEM)
    op.execute(DEPOSIT)


def downgrade() -> None:
    op.execute("DROP FUNCTION loyalty_codes_deposit(text, integer, text[])")
    op.execute(
        "DROP FUNCTION loyalty_redeem(text, text, bigint[], text[], timestamptz, text, "
        "bigint, timestamptz, boolean)"
    )
    op.execute(
        "DROP FUNCTION loyalty_tx(text, text, text, text, integer, text, text, bigint, text, "
        "text, text, timestamptz, bigint, bigint)"
    )
    op.execute(
        "DROP FUNCTION loyalty_move(text, bigint[], bigint[], integer[], bigint[], text, text)"
    )
