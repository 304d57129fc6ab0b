"""The back office's request ids: `peticiones`.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

One row per request id a back-office write was applied with (domain/requests.py,
store/requests.py): the program, the method, the id, the request's SHA-256 and the answer
given (the serialized response), so that a retry is answered again and applied once.

Rolling upgrade: the previous version neither reads nor writes the table (it has no
request ids: its calls are applied each time, as before).

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "peticiones",
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("metodo", sa.Text(), nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("huella", sa.LargeBinary(), nullable=False),
        sa.Column("respuesta", sa.LargeBinary(), nullable=True),
        sa.Column(
            "creada",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("programa_id", "metodo", "request_id", name=op.f("pk_peticiones")),
    )


def downgrade() -> None:
    op.drop_table("peticiones")
