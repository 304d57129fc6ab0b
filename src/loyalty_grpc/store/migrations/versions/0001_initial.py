"""The initial schema: programs, keys, fans (with the roster change trigger), promotions,
codes, sales and the points ledger.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Frozen: explicit op.* calls; it never imports store/tables.py (a test checks that the
migrated database and tables.py agree). Every name is final (`op.f`): the naming convention
of whatever target metadata env.py configures must not rewrite it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)

# The roster feed's change trigger: when an entry field changes, stamp the row with the
# time, the writing transaction's id and a new change number. Columns that are not roster
# fields (temporadas, qr_token, creado…) do not count as a change.
FANS_CAMBIO_FUNCTION = """
CREATE FUNCTION fans_cambio() RETURNS trigger LANGUAGE plpgsql AS $$
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

FANS_CAMBIO_TRIGGER = """
CREATE TRIGGER fans_cambio BEFORE UPDATE ON fans
FOR EACH ROW EXECUTE FUNCTION fans_cambio()
"""


def _creado() -> sa.Column[datetime]:
    return sa.Column("creado", TZ, nullable=False, server_default=sa.text("now()"))


def upgrade() -> None:
    op.create_table(
        "programas",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("nombre", sa.Text(), nullable=False),
        sa.Column("tasa_puntos", sa.Numeric(12, 6), nullable=False),
        sa.Column("qr_url", sa.Text(), nullable=False, server_default=""),
        sa.Column("moneda", sa.Text(), nullable=False, server_default="MXN"),
        _creado(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_programas")),
        sa.CheckConstraint("tasa_puntos >= 0", name=op.f("ck_programas_tasa_no_negativa")),
    )

    op.create_table(
        "claves",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
        sa.Column("modo", sa.Text(), nullable=False),
        sa.Column("integracion", sa.Text(), nullable=False),
        sa.Column("permisos", postgresql.ARRAY(sa.Text()), nullable=False, server_default="{}"),
        sa.Column("sufijo", sa.Text(), nullable=False),
        _creado(),
        sa.Column("revocada", TZ, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_claves")),
        sa.ForeignKeyConstraint(
            ["programa_id"], ["programas.id"], name=op.f("fk_claves_programa_id_programas")
        ),
        sa.UniqueConstraint("hash", name=op.f("uq_claves_hash")),
        sa.CheckConstraint("modo IN ('vivo', 'prueba')", name=op.f("ck_claves_modo")),
    )

    # The change counter must exist before `fans`, whose cambio_seq default calls it. Not
    # OWNED BY the column: that would make it look like a SERIAL to tools (autogenerate
    # then hides the default); downgrade drops it explicitly.
    op.execute(sa.text("CREATE SEQUENCE fans_cambio_seq AS bigint"))
    op.create_table(
        "fans",
        sa.Column("pk", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("fan_id", sa.Text(), nullable=False),
        sa.Column("nombre", sa.Text(), nullable=False),
        sa.Column("correo", sa.Text(), nullable=False),
        sa.Column("socio_desde", sa.Integer(), nullable=False),
        sa.Column("temporadas", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("qr_token", sa.Text(), nullable=False),
        sa.Column("puntos", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("estado", sa.Text(), nullable=False, server_default="activo"),
        sa.Column("baja_en", TZ, nullable=True),
        sa.Column("baja_motivo", sa.Text(), nullable=True),
        _creado(),
        sa.Column("actualizado", TZ, nullable=False, server_default=sa.text("now()")),
        sa.Column(
            "cambio_xid",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("pg_current_xact_id()::text::bigint"),
        ),
        sa.Column(
            "cambio_seq",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("nextval('fans_cambio_seq')"),
        ),
        sa.PrimaryKeyConstraint("pk", name=op.f("pk_fans")),
        sa.ForeignKeyConstraint(
            ["programa_id"], ["programas.id"], name=op.f("fk_fans_programa_id_programas")
        ),
        sa.CheckConstraint("estado IN ('activo', 'baja')", name=op.f("ck_fans_estado")),
        sa.CheckConstraint(
            "(estado = 'baja') = (baja_en IS NOT NULL)", name=op.f("ck_fans_baja_en")
        ),
        sa.CheckConstraint(
            "fan_id = upper(fan_id) AND fan_id !~ '\\s' AND fan_id <> ''",
            name=op.f("ck_fans_fan_id_canonico"),
        ),
    )
    op.create_index(op.f("uq_fans_programa_fan_id"), "fans", ["programa_id", "fan_id"], unique=True)
    op.create_index(
        op.f("uq_fans_programa_correo"),
        "fans",
        ["programa_id", sa.text("lower(correo)")],
        unique=True,
    )
    op.create_index(
        op.f("uq_fans_programa_qr_token"), "fans", ["programa_id", "qr_token"], unique=True
    )
    op.create_index(op.f("ix_fans_programa_cambio"), "fans", ["programa_id", "cambio_seq"])
    op.execute(sa.text(FANS_CAMBIO_FUNCTION))
    op.execute(sa.text(FANS_CAMBIO_TRIGGER))

    op.create_table(
        "promos",
        sa.Column("id", sa.Integer(), sa.Identity(), nullable=False),
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("nombre", sa.Text(), nullable=False),
        sa.Column("descripcion", sa.Text(), nullable=False, server_default=""),
        sa.Column("estado", sa.Text(), nullable=False, server_default="activa"),
        sa.Column("vigencia_fin", sa.Date(), nullable=False),
        sa.Column("puntos_canje", sa.Integer(), nullable=False, server_default="0"),
        _creado(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_promos")),
        sa.ForeignKeyConstraint(
            ["programa_id"], ["programas.id"], name=op.f("fk_promos_programa_id_programas")
        ),
        sa.CheckConstraint(
            "estado IN ('activa', 'pausada', 'terminada')", name=op.f("ck_promos_estado")
        ),
        sa.CheckConstraint("puntos_canje >= 0", name=op.f("ck_promos_puntos_canje")),
    )
    op.create_index(
        op.f("uq_promos_programa_nombre"),
        "promos",
        ["programa_id", sa.text("lower(nombre)")],
        unique=True,
    )

    op.create_table(
        "codigos",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("promo_id", sa.Integer(), nullable=False),
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("codigo", sa.Text(), nullable=False),
        sa.Column("estado", sa.Text(), nullable=False, server_default="disponible"),
        sa.Column("fan_pk", sa.BigInteger(), nullable=True),
        sa.Column("asignado_en", TZ, nullable=True),
        sa.Column("canjeado_en", TZ, nullable=True),
        sa.Column("canje_terminal", sa.Text(), nullable=True),
        sa.Column("liberado_en", TZ, nullable=True),
        _creado(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_codigos")),
        sa.ForeignKeyConstraint(
            ["promo_id"], ["promos.id"], name=op.f("fk_codigos_promo_id_promos")
        ),
        sa.ForeignKeyConstraint(
            ["programa_id"], ["programas.id"], name=op.f("fk_codigos_programa_id_programas")
        ),
        sa.ForeignKeyConstraint(["fan_pk"], ["fans.pk"], name=op.f("fk_codigos_fan_pk_fans")),
        sa.CheckConstraint(
            "estado IN ('disponible', 'asignado', 'canjeado', 'liberado')",
            name=op.f("ck_codigos_estado"),
        ),
        sa.CheckConstraint(
            "estado NOT IN ('asignado', 'canjeado') OR fan_pk IS NOT NULL",
            name=op.f("ck_codigos_fan_si_entregado"),
        ),
    )
    op.create_index(op.f("uq_codigos_promo_codigo"), "codigos", ["promo_id", "codigo"], unique=True)
    op.create_index(op.f("ix_codigos_programa_codigo"), "codigos", ["programa_id", "codigo"])
    op.create_index(op.f("ix_codigos_fan"), "codigos", ["fan_pk"])

    op.create_table(
        "ventas",
        sa.Column("id", sa.Integer(), sa.Identity(), nullable=False),
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("modo", sa.Text(), nullable=False),
        sa.Column("id_externo", sa.Text(), nullable=False),
        sa.Column("fan_pk", sa.BigInteger(), nullable=False),
        sa.Column("importe_centavos", sa.BigInteger(), nullable=False),
        sa.Column("moneda", sa.Text(), nullable=False),
        sa.Column("terminal", sa.Text(), nullable=True),
        sa.Column("sitio", sa.Text(), nullable=True),
        sa.Column("ts", TZ, nullable=False),
        sa.Column("puntos", sa.BigInteger(), nullable=False),
        sa.Column("clave_id", sa.BigInteger(), nullable=False),
        _creado(),
        sa.Column("anulada_en", TZ, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ventas")),
        sa.ForeignKeyConstraint(
            ["programa_id"], ["programas.id"], name=op.f("fk_ventas_programa_id_programas")
        ),
        sa.ForeignKeyConstraint(["fan_pk"], ["fans.pk"], name=op.f("fk_ventas_fan_pk_fans")),
        sa.ForeignKeyConstraint(
            ["clave_id"], ["claves.id"], name=op.f("fk_ventas_clave_id_claves")
        ),
        sa.CheckConstraint("modo IN ('vivo', 'prueba')", name=op.f("ck_ventas_modo")),
        sa.CheckConstraint("importe_centavos >= 0", name=op.f("ck_ventas_importe")),
    )
    op.create_index(
        op.f("uq_ventas_programa_modo_id_externo"),
        "ventas",
        ["programa_id", "modo", "id_externo"],
        unique=True,
    )

    op.create_table(
        "movimientos",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("fan_pk", sa.BigInteger(), nullable=False),
        sa.Column("puntos", sa.BigInteger(), nullable=False),
        sa.Column("motivo", sa.Text(), nullable=False),
        sa.Column("venta_id", sa.Integer(), nullable=True),
        sa.Column("codigo_id", sa.BigInteger(), nullable=True),
        sa.Column("nota", sa.Text(), nullable=False, server_default=""),
        _creado(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_movimientos")),
        sa.ForeignKeyConstraint(["fan_pk"], ["fans.pk"], name=op.f("fk_movimientos_fan_pk_fans")),
        sa.ForeignKeyConstraint(
            ["venta_id"], ["ventas.id"], name=op.f("fk_movimientos_venta_id_ventas")
        ),
        sa.ForeignKeyConstraint(
            ["codigo_id"], ["codigos.id"], name=op.f("fk_movimientos_codigo_id_codigos")
        ),
        sa.CheckConstraint(
            "motivo IN ('venta', 'canje', 'ajuste', 'anulacion')",
            name=op.f("ck_movimientos_motivo"),
        ),
    )
    op.create_index(op.f("ix_movimientos_fan"), "movimientos", ["fan_pk", "id"])


def downgrade() -> None:
    op.drop_table("movimientos")
    op.drop_table("ventas")
    op.drop_table("codigos")
    op.drop_table("promos")
    op.execute(sa.text("DROP TRIGGER fans_cambio ON fans"))
    op.execute(sa.text("DROP FUNCTION fans_cambio()"))
    op.drop_table("fans")
    op.execute(sa.text("DROP SEQUENCE fans_cambio_seq"))
    op.drop_table("claves")
    op.drop_table("programas")
