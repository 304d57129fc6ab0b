"""E-mails compared with ASCII letters case-insensitive and every other character exactly.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

The unique index uq_fans_programa_correo was on (programa_id, lower(correo)); under a
UTF-8 collation (the embedded server's is C.UTF-8) PostgreSQL's lower() also folds some
other letters into ASCII ones (the Kelvin sign U+212A into `k`), so an e-mail typed with
one reached another fan's (issue 22 §5). The index is now on lower(correo COLLATE "C"),
which folds A-Z only: the same fold as domain.fans.email_key, and the expression of the
resolve's lookup (store/fan_lookup.py).

Building it cannot fail on existing rows: two e-mails equal under the ASCII-only fold
differ only in the case of ASCII letters, so they were equal under the old index too.

Rolling upgrade (docs/deployment.md "Upgrades"): the previous version still looks fans up by
lower(correo); ix_fans_programa_correo_anterior keeps that lookup indexed until the next
release's migration drops it. The unique index keeps its name, which the previous version
also translates into `correo_duplicado`.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_fans_programa_correo_anterior"), "fans", ["programa_id", sa.text("lower(correo)")]
    )
    op.drop_index(op.f("uq_fans_programa_correo"), table_name="fans")
    op.create_index(
        op.f("uq_fans_programa_correo"),
        "fans",
        ["programa_id", sa.text('lower(correo COLLATE "C")')],
        unique=True,
    )


def downgrade() -> None:
    # Back to the collation's fold: refused (unique violation) if two fans' e-mails differ
    # only by letters that it folds together, which 0009 allowed.
    op.drop_index(op.f("uq_fans_programa_correo"), table_name="fans")
    op.create_index(
        op.f("uq_fans_programa_correo"),
        "fans",
        ["programa_id", sa.text("lower(correo)")],
        unique=True,
    )
    op.drop_index(op.f("ix_fans_programa_correo_anterior"), table_name="fans")
