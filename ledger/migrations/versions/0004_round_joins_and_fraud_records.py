"""round joins (protocol membership) and fraud records (failed replay audits)

Revision ID: 0004_joins_frauds
Revises: 0003_utc_times
Create Date: 2026-11-30 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_joins_frauds"
down_revision = "0003_utc_times"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "round_join",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("signature", sa.String(length=132), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round", "node", name="uq_round_join"),
    )
    op.create_index("ix_round_join_run_id", "round_join", ["run_id"])
    op.create_table(
        "fraud_record",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("digest", sa.String(length=66), nullable=False),
        sa.Column("evidence_hash", sa.String(length=66), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("withheld", sa.String(length=80), nullable=False),
        sa.Column("slash_tx", sa.String(length=66), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round", "node", name="uq_fraud_record"),
    )
    op.create_index("ix_fraud_record_run_id", "fraud_record", ["run_id"])
    op.create_index("ix_fraud_record_node", "fraud_record", ["node"])


def downgrade() -> None:
    op.drop_table("fraud_record")
    op.drop_table("round_join")
