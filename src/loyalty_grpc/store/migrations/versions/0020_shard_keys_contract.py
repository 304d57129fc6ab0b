"""Keys by program, contract: only for this version, once no server of the previous runs.

Revision ID: 0020
Revises: 0018
Create Date: 2026-11-27

Numbered 0020, after this release's expand revisions (0012–0018), which the previous
version runs on too: a contract revision is the last of its release.

CONTRACT = True: `loyalty migrate` applies it to an existing database only with
`--contract` (store/migrate.py), after every server runs a version that writes
`programa_id` itself (0012's code). A database with no revision goes straight through.

- The five `programa_id` columns 0012 added become NOT NULL. The triggers that fill them
  when an INSERT leaves them out stay, and so does `ventas.id`'s default
  (`ventas_folio_seq`): this version always names the program and passes the folio
  (store/folios.py), but SQL written for the schema before 0012 — the reference
  benchmark's pgbench sale (../shared/bench/tx_vs_pgbench.sh), an operator's script —
  keeps working on PostgreSQL (on Citus an INSERT without the distribution column is
  refused before any trigger).
- The program-leading unique indexes of 0012 become the primary keys of fans, promos,
  codigos, ventas, movimientos, wallet_outbox, wallet_pases, wallet_entregas and
  limite_llamadas; foreign keys between program tables name the program on both sides
  (on Citus a foreign key between distributed tables must include the distribution
  column); the single-column ones, and the indexes only the previous version's
  statements used, go.
- `limite_llamadas` no longer references `claves`: keys are revoked, never deleted, and on
  Citus the UNLOGGED table lives in a colocation group of its own (docs/citus.md).
- `wallet_outbox` keeps an index on `id` alone (`ix_wallet_outbox_id`): the previous
  version's wallet sender takes the oldest rows of every program by id, which the primary
  key no longer leads (this version's sender goes program by program, 0016; a later
  contract drops the index).
- `fans.cambio_seq` (read by no one since 0004) and its sequence go, and
  `ix_fans_programa_correo_anterior` (0009's index for the version before it).

Frozen: explicit SQL; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONTRACT = True

FROM_FAN = ["movimientos", "wallet_outbox", "wallet_pases", "wallet_entregas"]
FROM_KEY = ["limite_llamadas"]

# (table, the previous primary key's column, the unique index that becomes the primary key)
PRIMARY_KEYS = [
    ("fans", "pk", "uq_fans_programa_id_pk"),
    ("promos", "id", "uq_promos_programa_id_id"),
    ("codigos", "id", "uq_codigos_programa_id_id"),
    ("ventas", "id", "uq_ventas_programa_id_id"),
    ("movimientos", "id", "uq_movimientos_programa_id_id"),
    ("wallet_outbox", "id", "uq_wallet_outbox_programa_id_id"),
    ("wallet_pases", "fan_pk", "uq_wallet_pases_programa_id_fan_pk"),
    ("wallet_entregas", "id", "uq_wallet_entregas_programa_id_id"),
    ("limite_llamadas", "clave_id", "uq_limite_llamadas_programa_id_clave_id"),
]

# (table, name, definition): the single-column foreign keys that go (restored on downgrade).
OLD_FOREIGN_KEYS = [
    ("codigos", "fk_codigos_promo_id_promos", "FOREIGN KEY (promo_id) REFERENCES promos(id)"),
    ("codigos", "fk_codigos_fan_pk_fans", "FOREIGN KEY (fan_pk) REFERENCES fans(pk)"),
    ("ventas", "fk_ventas_fan_pk_fans", "FOREIGN KEY (fan_pk) REFERENCES fans(pk)"),
    ("movimientos", "fk_movimientos_fan_pk_fans", "FOREIGN KEY (fan_pk) REFERENCES fans(pk)"),
    (
        "movimientos",
        "fk_movimientos_venta_id_ventas",
        "FOREIGN KEY (venta_id) REFERENCES ventas(id)",
    ),
    (
        "movimientos",
        "fk_movimientos_codigo_id_codigos",
        "FOREIGN KEY (codigo_id) REFERENCES codigos(id)",
    ),
    ("wallet_outbox", "fk_wallet_outbox_fan_pk_fans", "FOREIGN KEY (fan_pk) REFERENCES fans(pk)"),
    ("wallet_pases", "fk_wallet_pases_fan_pk_fans", "FOREIGN KEY (fan_pk) REFERENCES fans(pk)"),
    (
        "wallet_entregas",
        "fk_wallet_entregas_fan_pk_fans",
        "FOREIGN KEY (fan_pk) REFERENCES fans(pk)",
    ),
    (
        "limite_llamadas",
        "fk_limite_llamadas_clave_id_claves",
        "FOREIGN KEY (clave_id) REFERENCES claves(id) ON DELETE CASCADE",
    ),
]

# (table, name, definition): the foreign keys between program tables, program first.
NEW_FOREIGN_KEYS = [
    (
        "codigos",
        "fk_codigos_programa_id_promos",
        "FOREIGN KEY (programa_id, promo_id) REFERENCES promos(programa_id, id)",
    ),
    (
        "codigos",
        "fk_codigos_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
    (
        "ventas",
        "fk_ventas_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
    (
        "movimientos",
        "fk_movimientos_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
    (
        "movimientos",
        "fk_movimientos_programa_id_ventas",
        "FOREIGN KEY (programa_id, venta_id) REFERENCES ventas(programa_id, id)",
    ),
    (
        "movimientos",
        "fk_movimientos_programa_id_codigos",
        "FOREIGN KEY (programa_id, codigo_id) REFERENCES codigos(programa_id, id)",
    ),
    (
        "wallet_outbox",
        "fk_wallet_outbox_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
    (
        "wallet_pases",
        "fk_wallet_pases_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
    (
        "wallet_entregas",
        "fk_wallet_entregas_programa_id_fans",
        "FOREIGN KEY (programa_id, fan_pk) REFERENCES fans(programa_id, pk)",
    ),
]

# (name, definition): indexes only the previous version's statements used.
OLD_INDEXES = [
    ("uq_codigos_promo_codigo", "CREATE UNIQUE INDEX {} ON codigos (promo_id, codigo)"),
    ("ix_codigos_fan", "CREATE INDEX {} ON codigos (fan_pk)"),
    ("ix_codigos_promo_estado", "CREATE INDEX {} ON codigos (promo_id, estado)"),
    ("ix_movimientos_fan", "CREATE INDEX {} ON movimientos (fan_pk, id)"),
    ("ix_wallet_entregas_fan", "CREATE INDEX {} ON wallet_entregas (fan_pk, id)"),
    ("ix_fans_programa_correo_anterior", "CREATE INDEX {} ON fans (programa_id, lower(correo))"),
]

# The roster trigger without the change counter.
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
        IF NEW.puntos IS DISTINCT FROM OLD.puntos THEN
            NEW.saldo_version := OLD.saldo_version + 1;
        END IF;
    END IF;
    RETURN NEW;
END
$$
"""

# 0016's (0012's with the balance version), with the change counter (restored on
# downgrade).
FANS_CAMBIO_0012 = FANS_CAMBIO.replace(
    "        NEW.cambio_xid := pg_current_xact_id()::text::bigint;\n        IF NEW.puntos",
    "        NEW.cambio_xid := pg_current_xact_id()::text::bigint;\n"
    "        NEW.cambio_seq := nextval('fans_cambio_seq');\n        IF NEW.puntos",
)


def _sql(statement: str) -> None:
    op.execute(sa.text(statement))


def upgrade() -> None:
    _sql(
        "LOCK TABLE fans, promos, codigos, ventas, movimientos, wallet_outbox, "
        "wallet_pases, wallet_entregas, limite_llamadas IN ACCESS EXCLUSIVE MODE"
    )
    for table in FROM_FAN + FROM_KEY:
        _sql(f"ALTER TABLE {table} ALTER COLUMN programa_id SET NOT NULL")

    for table, name, _definition in OLD_FOREIGN_KEYS:
        _sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for table, _columns, index in PRIMARY_KEYS:
        _sql(
            f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}, "
            f"ADD CONSTRAINT pk_{table} PRIMARY KEY USING INDEX {index}"
        )
    for table, name, definition in NEW_FOREIGN_KEYS:
        _sql(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for name, _definition in OLD_INDEXES:
        _sql(f"DROP INDEX {name}")
    _sql("CREATE INDEX ix_wallet_outbox_id ON wallet_outbox (id)")

    _sql(FANS_CAMBIO)
    _sql("ALTER TABLE fans DROP COLUMN cambio_seq")
    _sql("DROP SEQUENCE fans_cambio_seq")


def downgrade() -> None:
    _sql("CREATE SEQUENCE fans_cambio_seq AS bigint")
    _sql(
        "ALTER TABLE fans ADD COLUMN cambio_seq bigint NOT NULL DEFAULT nextval('fans_cambio_seq')"
    )
    _sql(FANS_CAMBIO_0012)

    _sql("DROP INDEX ix_wallet_outbox_id")
    for name, definition in OLD_INDEXES:
        _sql(definition.format(name))
    for table, name, _definition in NEW_FOREIGN_KEYS:
        _sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for table, column, index in PRIMARY_KEYS:
        _sql(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}")
        _sql(f"CREATE UNIQUE INDEX {index} ON {table} (programa_id, {column})")
        _sql(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY ({column})")
    for table, name, definition in OLD_FOREIGN_KEYS:
        _sql(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")

    for table in FROM_FAN + FROM_KEY:
        _sql(f"ALTER TABLE {table} ALTER COLUMN programa_id DROP NOT NULL")
