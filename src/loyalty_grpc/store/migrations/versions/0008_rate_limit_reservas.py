"""Per-key call limit without refusing early: `limite_llamadas.reservas`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30

Spare calls a process holds for a key (reserved in a batch, not used yet) are counted as
used, so another process was refused before the limit. The row now also counts the spare
calls outstanding over all processes, per second of the last 5 (domain/rate_limit.py), and
the statement caps them at a slack of limit // 60 - 2. Existing rows start with nothing
outstanding (their spare calls, if any, stay counted in `cuentas`: stricter for up to a
minute, never looser). The server default lets a process of the previous version, which
does not know the column, still insert a row during a rolling upgrade; its updates move
`segundo` without shifting `reservas`, which at worst keeps a key's spare calls counted as
outstanding a few seconds too long (fewer spare calls, never more calls).

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "limite_llamadas",
        sa.Column(
            "reservas", postgresql.ARRAY(sa.Integer()), nullable=False, server_default="{0,0,0,0,0}"
        ),
    )


def downgrade() -> None:
    op.drop_column("limite_llamadas", "reservas")
