"""Per-key call limit in batches: `limite_llamadas.admitida` becomes `concedidas`.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21

A process now reserves several calls of a key at once (services/rate_limit.py), so the
statement reports how many it granted instead of whether the one call was admitted. The
column only carries the last statement's answer out through RETURNING: nothing to convert.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_column("limite_llamadas", "admitida")
    op.add_column(
        "limite_llamadas", sa.Column("concedidas", sa.Integer(), nullable=False, server_default="0")
    )
    op.alter_column("limite_llamadas", "concedidas", server_default=None)


def downgrade() -> None:
    op.drop_column("limite_llamadas", "concedidas")
    op.add_column(
        "limite_llamadas",
        sa.Column("admitida", sa.Boolean(), nullable=False, server_default=sa.true()),
    )
    op.alter_column("limite_llamadas", "admitida", server_default=None)
