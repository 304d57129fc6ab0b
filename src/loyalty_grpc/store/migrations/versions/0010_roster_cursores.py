"""Roster cursors bound to the database that issued them: `roster_cursores`.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

One row per distinct cursor the roster feed hands out (store/roster_cursors.py): the
program, the issuing cluster's system identifier, the cursor's phase and position. A
cursor is honoured only when its row is there, so a database restored to a point before a
cursor was issued refuses it (cursor_invalido) instead of letting a follower skip changes
(docs/roster.md "Cursors across a failover or a restore").

Cursors of the previous format (version 1) are refused by the code of this release: every
follower takes one new snapshot after the upgrade (docs/roster.md). Rolling upgrade: the
previous version neither reads nor writes the table, and refuses the new cursors as
cursor_invalido; a follower served by both slots during the upgrade may be asked to start
again more than once until the previous slot is gone.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "roster_cursores",
        sa.Column("programa_id", sa.Text(), nullable=False),
        sa.Column("sistema", sa.BigInteger(), nullable=False),
        sa.Column("fase", sa.SmallInteger(), nullable=False),
        sa.Column("xid", sa.BigInteger(), nullable=False),
        sa.Column("pk", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "programa_id", "sistema", "fase", "xid", "pk", name=op.f("pk_roster_cursores")
        ),
    )


def downgrade() -> None:
    op.drop_table("roster_cursores")
