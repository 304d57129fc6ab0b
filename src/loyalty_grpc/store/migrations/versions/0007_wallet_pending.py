"""Wallet sender whose cost does not grow with its backlog: the pending balance lives in
the fan's `wallet_pases` row.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

- wallet_pases gains `saldo_pendiente` (the balance waiting to be delivered), `saldo_id`
  (the wallet_outbox id it came from; kept after delivery so that an older balance folded
  late never replaces a newer one) and `pendiente_desde` (when the oldest waiting balance
  was written), and two partial indexes over the fans with a balance waiting (`pendiente_desde
  IS NOT NULL`): the claim's (`proximo_intento`, `pendiente_desde`) and the backlog age's
  (`pendiente_desde`). Fillfactor 80: folding a newer balance into one already waiting
  changes no indexed column, a HOT update when the page has room.
- ix_wallet_outbox_fan goes: the sender now only takes the oldest rows by id (the primary
  key), so a balance change writes one index entry instead of two.
- Both tables are vacuumed after every 10,000 dead rows (a queue's dead index entries
  slow the scans for its head until vacuum removes them).

Existing data stays as it is: pending balances are still outbox rows, which the new
sender folds in; `wallet_pases` rows keep their attempts, back-off and history.
Downgrade puts the balances waiting in `wallet_pases` back into wallet_outbox under their
original ids, where 0006's sender finds them.

Frozen: explicit op.* calls; it never imports store/tables.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.DateTime(timezone=True)
PENDING = sa.text("pendiente_desde IS NOT NULL")
VACUUM = "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000"


def upgrade() -> None:
    op.add_column("wallet_pases", sa.Column("saldo_pendiente", sa.BigInteger(), nullable=True))
    op.add_column("wallet_pases", sa.Column("saldo_id", sa.BigInteger(), nullable=True))
    op.add_column("wallet_pases", sa.Column("pendiente_desde", TZ, nullable=True))
    op.create_check_constraint(
        op.f("ck_wallet_pases_pendiente"),
        "wallet_pases",
        "(saldo_pendiente IS NULL) = (pendiente_desde IS NULL) "
        "AND (saldo_pendiente IS NULL OR saldo_id IS NOT NULL)",
    )
    op.create_index(
        op.f("ix_wallet_pases_due"),
        "wallet_pases",
        ["proximo_intento", "pendiente_desde"],
        postgresql_where=PENDING,
    )
    op.create_index(
        op.f("ix_wallet_pases_pendiente_desde"),
        "wallet_pases",
        ["pendiente_desde"],
        postgresql_where=PENDING,
    )
    op.drop_index(op.f("ix_wallet_outbox_fan"), table_name="wallet_outbox")
    op.execute(f"ALTER TABLE wallet_outbox SET ({VACUUM})")
    op.execute(f"ALTER TABLE wallet_pases SET (fillfactor = 80, {VACUUM})")


def downgrade() -> None:
    op.execute(
        "ALTER TABLE wallet_pases RESET (fillfactor, autovacuum_vacuum_scale_factor, "
        "autovacuum_vacuum_threshold)"
    )
    op.execute(
        "ALTER TABLE wallet_outbox RESET (autovacuum_vacuum_scale_factor, "
        "autovacuum_vacuum_threshold)"
    )
    op.create_index(op.f("ix_wallet_outbox_fan"), "wallet_outbox", ["fan_pk", "id"])
    op.execute(
        "INSERT INTO wallet_outbox (id, fan_pk, saldo, creado) "
        "SELECT saldo_id, fan_pk, saldo_pendiente, pendiente_desde FROM wallet_pases "
        "WHERE saldo_pendiente IS NOT NULL"
    )
    op.drop_index(op.f("ix_wallet_pases_pendiente_desde"), table_name="wallet_pases")
    op.drop_index(op.f("ix_wallet_pases_due"), table_name="wallet_pases")
    op.drop_constraint(op.f("ck_wallet_pases_pendiente"), "wallet_pases", type_="check")
    op.drop_column("wallet_pases", "pendiente_desde")
    op.drop_column("wallet_pases", "saldo_id")
    op.drop_column("wallet_pases", "saldo_pendiente")
