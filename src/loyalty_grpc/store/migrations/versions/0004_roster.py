"""Roster feed: the indexes its two kinds of page read.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22

- ix_fans_programa_cambio_xid (programa_id, cambio_xid, pk): a page of changes is one
  range scan of it, `(cambio_xid, pk) > cursor AND cambio_xid < horizon` (services/pos/roster.py).
- ix_fans_programa_pk (programa_id, pk): a snapshot page is one range scan of it.
- ix_fans_programa_cambio (programa_id, cambio_seq) goes: no reader orders by the change
  counter (a sequence-number cursor skips changes committed out of order; see
  tests/integration/test_roster_consistency.py). The column, its sequence and the trigger
  fans_cambio stay as 0001 made them: the trigger already stamps cambio_xid with the
  writer's transaction id on every change of an entry field, and inserts take it as
  their default.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_fans_programa_cambio_xid"), "fans", ["programa_id", "cambio_xid", "pk"]
    )
    op.create_index(op.f("ix_fans_programa_pk"), "fans", ["programa_id", "pk"])
    op.drop_index(op.f("ix_fans_programa_cambio"), table_name="fans")


def downgrade() -> None:
    op.create_index(op.f("ix_fans_programa_cambio"), "fans", ["programa_id", "cambio_seq"])
    op.drop_index(op.f("ix_fans_programa_pk"), table_name="fans")
    op.drop_index(op.f("ix_fans_programa_cambio_xid"), table_name="fans")
