"""Per-key call limit: the UNLOGGED counter table `limite_llamadas`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29

One row per API key: the newest second seen and 61 per-second counters of admitted calls
(domain/rate_limit.py). UNLOGGED: the row changes on every call and needs no WAL; a crash
empties it (every key starts a fresh minute), which is acceptable for a guard against
runaway loops.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "limite_llamadas",
        sa.Column("clave_id", sa.BigInteger(), nullable=False),
        sa.Column("segundo", sa.BigInteger(), nullable=False),
        sa.Column("cuentas", postgresql.ARRAY(sa.Integer()), nullable=False),
        sa.Column("admitida", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("clave_id", name=op.f("pk_limite_llamadas")),
        sa.ForeignKeyConstraint(
            ["clave_id"],
            ["claves.id"],
            ondelete="CASCADE",
            name=op.f("fk_limite_llamadas_clave_id_claves"),
        ),
        prefixes=["UNLOGGED"],
    )


def downgrade() -> None:
    op.drop_table("limite_llamadas")
