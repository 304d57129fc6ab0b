"""Coupons: which key burned a code and when the server recorded it; an index for the
per-promotion inventory counts.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("codigos", sa.Column("canje_clave_id", sa.BigInteger(), nullable=True))
    op.create_foreign_key(
        op.f("fk_codigos_canje_clave_id_claves"), "codigos", "claves", ["canje_clave_id"], ["id"]
    )
    op.add_column(
        "codigos", sa.Column("canje_registrado", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index(op.f("ix_codigos_promo_estado"), "codigos", ["promo_id", "estado"])


def downgrade() -> None:
    op.drop_index(op.f("ix_codigos_promo_estado"), table_name="codigos")
    op.drop_column("codigos", "canje_registrado")
    op.drop_constraint(op.f("fk_codigos_canje_clave_id_claves"), "codigos", type_="foreignkey")
    op.drop_column("codigos", "canje_clave_id")
