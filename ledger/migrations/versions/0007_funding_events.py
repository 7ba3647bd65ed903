"""funding events: RunFunding and CodeRegistry events, indexed (receipts without RPC)

Revision ID: 0007_funding_events
Revises: 0006_node_ids_roots
Create Date: 2026-11-30 18:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_funding_events"
down_revision = "0006_node_ids_roots"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "funding_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("contract", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=True),
        sa.Column("account", sa.String(length=42), nullable=True),
        sa.Column("ref", sa.String(length=80), nullable=True),
        sa.Column("amount", sa.String(length=80), nullable=True),
        sa.Column("running", sa.String(length=100), nullable=True),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        sa.Column("block_time", sa.BigInteger(), nullable=False),
        sa.Column("log_index", sa.Integer(), nullable=False),
        sa.Column("tx_hash", sa.String(length=66), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tx_hash", "log_index", name="uq_funding_event"),
    )
    op.create_index("ix_funding_event_run_name", "funding_event", ["run_id", "name"])
    op.create_index("ix_funding_event_account", "funding_event", ["account"])
    op.create_index("ix_funding_event_ref", "funding_event", ["ref"])
    op.create_index("ix_funding_event_block_number", "funding_event", ["block_number"])
    # the indexer's cursor is past these contracts' history: walk it again from the deployment
    # block (the other tables' rows are kept, each insert is idempotent)
    op.execute("DELETE FROM keyvalue WHERE key IN ('indexer.cursor', 'indexer.cursor_hash')")


def downgrade() -> None:
    op.drop_index("ix_funding_event_block_number", table_name="funding_event")
    op.drop_index("ix_funding_event_ref", table_name="funding_event")
    op.drop_index("ix_funding_event_account", table_name="funding_event")
    op.drop_index("ix_funding_event_run_name", table_name="funding_event")
    op.drop_table("funding_event")
