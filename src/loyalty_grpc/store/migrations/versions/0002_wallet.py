"""Wallet pass: the balance outbox, the sender's per-fan state and the local provider's
deliveries.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02

Frozen: explicit op.* calls; it never imports store/tables.py (a test checks that the
migrated database and tables.py agree). Every name is final (`op.f`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "wallet_outbox",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("fan_pk", sa.BigInteger(), nullable=False),
        sa.Column("saldo", sa.BigInteger(), nullable=False),
        sa.Column("creado", TZ, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_outbox")),
        sa.ForeignKeyConstraint(["fan_pk"], ["fans.pk"], name=op.f("fk_wallet_outbox_fan_pk_fans")),
    )
    op.create_index(op.f("ix_wallet_outbox_fan"), "wallet_outbox", ["fan_pk", "id"])

    op.create_table(
        "wallet_pases",
        sa.Column("fan_pk", sa.BigInteger(), nullable=False),
        sa.Column("intentos", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("proximo_intento", TZ, nullable=False, server_default=sa.text("now()")),
        sa.Column("ultimo_error", sa.Text(), nullable=True),
        sa.Column("error_en", TZ, nullable=True),
        sa.Column("entregado_saldo", sa.BigInteger(), nullable=True),
        sa.Column("entregado_en", TZ, nullable=True),
        sa.PrimaryKeyConstraint("fan_pk", name=op.f("pk_wallet_pases")),
        sa.ForeignKeyConstraint(["fan_pk"], ["fans.pk"], name=op.f("fk_wallet_pases_fan_pk_fans")),
        sa.CheckConstraint("intentos >= 0", name=op.f("ck_wallet_pases_intentos")),
    )

    op.create_table(
        "wallet_entregas",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("fan_pk", sa.BigInteger(), nullable=False),
        sa.Column("saldo", sa.BigInteger(), nullable=False),
        sa.Column("proveedor", sa.Text(), nullable=False),
        sa.Column("entregado", TZ, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_entregas")),
        sa.ForeignKeyConstraint(
            ["fan_pk"], ["fans.pk"], name=op.f("fk_wallet_entregas_fan_pk_fans")
        ),
    )
    op.create_index(op.f("ix_wallet_entregas_fan"), "wallet_entregas", ["fan_pk", "id"])


def downgrade() -> None:
    op.drop_table("wallet_entregas")
    op.drop_table("wallet_pases")
    op.drop_table("wallet_outbox")
