"""node ids and root finality: the indexer keys nodes by StakeManager's stable node id and records
each committed root's dispute window (finalized_at) and revocation

Revision ID: 0006_node_ids_roots
Revises: 0005_payout_totals
Create Date: 2026-11-30 19:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_node_ids_roots"
down_revision = "0005_payout_totals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # filled by the indexer: it re-reads every known key once (ledger/chain/indexer.py, backfill)
    with op.batch_alter_table("node") as batch:
        batch.add_column(sa.Column("node_id", sa.BigInteger(), nullable=True))
        batch.create_index("ix_node_node_id", ["node_id"])
    with op.batch_alter_table("chaincommit") as batch:
        batch.add_column(sa.Column("finalized_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("revoked_block", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chaincommit") as batch:
        batch.drop_column("revoked_block")
        batch.drop_column("finalized_at")
    with op.batch_alter_table("node") as batch:
        batch.drop_index("ix_node_node_id")
        batch.drop_column("node_id")
