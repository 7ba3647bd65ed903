"""settlement.leases: the lease leaves a settlement's rewards root holds

Each settlement intent records, beside its rewards amounts (`tree`), the ComputeLeases leaves it
folds into the same root (JSON [[lease id, cumulative wei, through round], ...]); the root, the
proofs served and the watcher's check are rebuilt from both. NULL: no lease leaves (every row
written before this revision).

Revision ID: 0016_settlement_leases
Revises: 0012_round_join_node
Create Date: 2026-12-03 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_settlement_leases"
down_revision = "0015_market_challenges"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("settlement") as batch:
        batch.add_column(sa.Column("leases", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("settlement") as batch:
        batch.drop_column("leases")
