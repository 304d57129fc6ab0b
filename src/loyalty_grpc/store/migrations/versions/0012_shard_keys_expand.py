"""Keys by program, expand: the previous version keeps working on it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

Issue 27 distributes every table by `programa_id` (Citus); on PostgreSQL without Citus the
same schema serves. Distribution needs the program in every key, so this revision and the
contract (0020) move the keys; docs/citus.md and docs/deployment.md "Upgrades".

- Identity columns become plain sequence defaults (`<table>_<column>_seq`, continuing where
  the identity was): Citus refuses identities of `int`, and a default is what it distributes.
  `ventas.id`, the folio, takes its default from `ventas_folio_seq` (`integer`: `tx` is an
  int32 JSON number), which this version's sales read in blocks (store/folios.py) and
  pass explicitly; the default serves the previous version until 0020 drops it.
- `programa_id` is added to `movimientos`, `wallet_outbox`, `wallet_pases`,
  `wallet_entregas` (the fan's program) and `limite_llamadas` (the key's), backfilled.
  The previous version's inserts do not name it: a `BEFORE INSERT` trigger fills it, only
  when NULL (`WHEN`, so this version's inserts never call the function).
- The program-leading unique indexes 0020 turns into primary keys, and the new code's
  `ON CONFLICT` targets, are built beside the old ones (the previous version's targets);
  `IF NOT EXISTS`, so that an operator may build them first with `CREATE INDEX
  CONCURRENTLY` under the same names (docs/deployment.md).
- The roster trigger stamps `cambio_xid` on inserts too: on Citus the trigger fires on the
  worker, so the transaction id is the one the worker's roster page compares with (the
  column default would be evaluated on the coordinator).

Rolling upgrade: everything the previous version writes still succeeds (its columns,
defaults and `ON CONFLICT` targets are all here) and everything it reads is unchanged.

Frozen: explicit SQL; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, sequence, type): the identity columns and the sequences replacing them.
SEQUENCES = [
    ("claves", "id", "claves_id_seq", "bigint"),
    ("fans", "pk", "fans_pk_seq", "bigint"),
    ("promos", "id", "promos_id_seq", "integer"),
    ("codigos", "id", "codigos_id_seq", "bigint"),
    ("ventas", "id", "ventas_folio_seq", "integer"),
    ("movimientos", "id", "movimientos_id_seq", "bigint"),
    ("wallet_outbox", "id", "wallet_outbox_id_seq", "bigint"),
    ("wallet_entregas", "id", "wallet_entregas_id_seq", "bigint"),
]

# Tables gaining `programa_id`, with where the previous version's rows find it.
FROM_FAN = ["movimientos", "wallet_outbox", "wallet_pases", "wallet_entregas"]
FROM_KEY = ["limite_llamadas"]

FILL_FROM_FAN = """
CREATE FUNCTION loyalty_programa_del_fan() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT f.programa_id INTO NEW.programa_id FROM fans f WHERE f.pk = NEW.fan_pk;
    RETURN NEW;
END
$$
"""

FILL_FROM_KEY = """
CREATE FUNCTION loyalty_programa_de_la_clave() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT c.programa_id INTO NEW.programa_id FROM claves c WHERE c.id = NEW.clave_id;
    RETURN NEW;
END
$$
"""

# (index, table, columns): the program-leading keys (0020's primary keys among them).
UNIQUE = [
    ("uq_fans_programa_id_pk", "fans", "programa_id, pk"),
    ("uq_promos_programa_id_id", "promos", "programa_id, id"),
    ("uq_codigos_programa_id_id", "codigos", "programa_id, id"),
    ("uq_ventas_programa_id_id", "ventas", "programa_id, id"),
    ("uq_movimientos_programa_id_id", "movimientos", "programa_id, id"),
    ("uq_wallet_outbox_programa_id_id", "wallet_outbox", "programa_id, id"),
    ("uq_wallet_pases_programa_id_fan_pk", "wallet_pases", "programa_id, fan_pk"),
    ("uq_wallet_entregas_programa_id_id", "wallet_entregas", "programa_id, id"),
    ("uq_limite_llamadas_programa_id_clave_id", "limite_llamadas", "programa_id, clave_id"),
    ("uq_codigos_programa_id_promo_id_codigo", "codigos", "programa_id, promo_id, codigo"),
]
INDEXES = [
    ("ix_codigos_programa_id_fan_pk", "codigos", "programa_id, fan_pk"),
    ("ix_codigos_programa_id_promo_id_estado", "codigos", "programa_id, promo_id, estado"),
    ("ix_movimientos_programa_id_fan_pk_id", "movimientos", "programa_id, fan_pk, id"),
    ("ix_wallet_entregas_programa_id_fan_pk_id", "wallet_entregas", "programa_id, fan_pk, id"),
]

# The roster trigger: an insert is a change too (its transaction id stamped where the
# row is written); updates as before (0001), `cambio_seq` included while the previous
# version reads it.
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
    END IF;
    RETURN NEW;
END
$$
"""

FANS_CAMBIO_0001 = """
CREATE OR REPLACE FUNCTION fans_cambio() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.fan_id, NEW.nombre, NEW.correo, NEW.socio_desde, NEW.puntos, NEW.estado,
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


def _sql(statement: str) -> None:
    op.execute(sa.text(statement))


def upgrade() -> None:
    # Every table whose keys change, locked up front in one order: no sale may insert
    # between reading an identity's last value and the default that continues it.
    _sql(
        "LOCK TABLE claves, fans, promos, codigos, ventas, movimientos, wallet_outbox, "
        "wallet_pases, wallet_entregas, limite_llamadas IN ACCESS EXCLUSIVE MODE"
    )
    bind = op.get_bind()
    for table, column, sequence, type_ in SEQUENCES:
        last = bind.execute(
            sa.text("SELECT pg_sequence_last_value(pg_get_serial_sequence(:t, :c))"),
            {"t": table, "c": column},
        ).scalar()
        _sql(f"ALTER TABLE {table} ALTER COLUMN {column} DROP IDENTITY")
        _sql(f"CREATE SEQUENCE {sequence} AS {type_}")
        if last is not None:
            bind.execute(sa.text("SELECT setval(:s, :v)"), {"s": sequence, "v": last})
        _sql(f"ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT nextval('{sequence}')")

    _sql(FILL_FROM_FAN)
    _sql(FILL_FROM_KEY)
    for table in FROM_FAN + FROM_KEY:
        _sql(f"ALTER TABLE {table} ADD COLUMN programa_id text")
    sources = [(t, "fans s WHERE s.pk = t.fan_pk") for t in FROM_FAN] + [
        (t, "claves s WHERE s.id = t.clave_id") for t in FROM_KEY
    ]
    for table, source in sources:
        backfill = f"UPDATE {table} t SET programa_id = s.programa_id FROM {source}"  # noqa: S608
        _sql(backfill)
    for table, function in [(t, "loyalty_programa_del_fan") for t in FROM_FAN] + [
        (t, "loyalty_programa_de_la_clave") for t in FROM_KEY
    ]:
        _sql(
            f"CREATE TRIGGER {table}_programa BEFORE INSERT ON {table} FOR EACH ROW "
            f"WHEN (NEW.programa_id IS NULL) EXECUTE FUNCTION {function}()"
        )

    for name, table, columns in UNIQUE:
        _sql(f"CREATE UNIQUE INDEX IF NOT EXISTS {name} ON {table} ({columns})")
    for name, table, columns in INDEXES:
        _sql(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({columns})")
    # The unique (programa_id, pk) serves every lookup the plain index served.
    _sql("DROP INDEX ix_fans_programa_pk")

    _sql(FANS_CAMBIO)
    _sql("DROP TRIGGER fans_cambio ON fans")
    _sql(
        "CREATE TRIGGER fans_cambio BEFORE INSERT OR UPDATE ON fans "
        "FOR EACH ROW EXECUTE FUNCTION fans_cambio()"
    )


def downgrade() -> None:
    _sql("DROP TRIGGER fans_cambio ON fans")
    _sql(FANS_CAMBIO_0001)
    _sql(
        "CREATE TRIGGER fans_cambio BEFORE UPDATE ON fans "
        "FOR EACH ROW EXECUTE FUNCTION fans_cambio()"
    )
    _sql("CREATE INDEX ix_fans_programa_pk ON fans (programa_id, pk)")
    for name, _table, _columns in UNIQUE + INDEXES:
        _sql(f"DROP INDEX {name}")
    for table in FROM_FAN + FROM_KEY:
        _sql(f"DROP TRIGGER {table}_programa ON {table}")
        _sql(f"ALTER TABLE {table} DROP COLUMN programa_id")
    _sql("DROP FUNCTION loyalty_programa_del_fan()")
    _sql("DROP FUNCTION loyalty_programa_de_la_clave()")
    bind = op.get_bind()
    for table, column, sequence, _type in SEQUENCES:
        last = bind.execute(
            sa.text(f"SELECT last_value, is_called FROM {sequence}")  # noqa: S608 (this module's)
        ).one()
        _sql(f"ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT")
        _sql(f"DROP SEQUENCE {sequence}")
        start = last.last_value + 1 if last.is_called else last.last_value
        _sql(
            f"ALTER TABLE {table} ALTER COLUMN {column} "
            f"ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {start})"
        )
