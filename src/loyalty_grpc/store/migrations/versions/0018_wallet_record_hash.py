"""The wallet sender's record joins its arrays to the claimed rows by hash, never in a
nested loop.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28

Expand: a setting on one function; nothing else. The previous version never calls it.

- `loyalty_wallet_record` (0016) runs with `enable_nestloop = off` (`ALTER FUNCTION …
  SET`). Its UPDATE joins the claimed `wallet_pases` rows to `unnest` of the outcome
  arrays. The rows are found by `fan_pk = ANY (…)` and `proximo_intento = p_lease_until`,
  and the lease is a value the statistics have never seen, so the planner expects about
  one row and may put them on the outer side of a nested loop, reading the whole unnest
  again for each row: quadratic in the batch. Measured in the reference benchmark's run
  (auto_explain): 0.1 s for 417 fans, 0.9 s for 1,000, while the sender folded the sales'
  backlog, on the same PostgreSQL that answers the cashiers. With the setting the join is
  a hash join: 5–15 ms for 1,000 fans. The lock of the rows before it (`PERFORM … FOR
  UPDATE`) joins nothing.

On a Citus coordinator the function is distributed (store/distribution.py) and Citus
propagates `ALTER FUNCTION` to the nodes: the call runs there with the setting.

Frozen: explicit SQL; it never imports store/.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RECORD = (
    "loyalty_wallet_record(text, bigint[], bigint[], bigint[], boolean[], integer[], "
    "timestamptz[], bigint[], text[], timestamptz, timestamptz, timestamptz)"
)


def upgrade() -> None:
    op.execute(f"ALTER FUNCTION {RECORD} SET enable_nestloop = off")


def downgrade() -> None:
    op.execute(f"ALTER FUNCTION {RECORD} RESET enable_nestloop")
