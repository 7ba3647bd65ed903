"""segment_bisection: a failed segment bisected to a one-step verdict

A boundary request may now ask for the node's state after ``at_step`` inner steps inside the
segment after boundary ``boundary`` (a bisection's probe; -1: the committed boundary itself, every
row written before this revision), and ``segment_bisection`` keeps each bisection's interval,
the probe awaited and the verdict's evidence (ledger.judge.bisect), so a restart resumes it.

Revision ID: 0018_segment_bisection
Revises: 0016_settlement_leases
Create Date: 2026-12-03 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_segment_bisection"
down_revision = "0016_settlement_leases"
branch_labels = None
depends_on = None

OLD = ["run_id", "round", "node", "boundary"]


def upgrade() -> None:
    with op.batch_alter_table("boundary_request") as batch:
        batch.add_column(sa.Column("at_step", sa.BigInteger(), nullable=False, server_default="-1"))
        batch.drop_constraint("uq_boundary_request", type_="unique")
        batch.create_unique_constraint("uq_boundary_request", [*OLD, "at_step"])
    op.create_table(
        "segment_bisection",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("boundary", sa.BigInteger(), nullable=False),
        sa.Column("seg_lo", sa.BigInteger(), nullable=False),
        sa.Column("seg_hi", sa.BigInteger(), nullable=False),
        sa.Column("lo", sa.BigInteger(), nullable=False),
        sa.Column("hi", sa.BigInteger(), nullable=False),
        sa.Column("probe", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("states", sa.Text(), nullable=False),
        sa.Column("inputs", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=True),
        sa.Column("evidence_hash", sa.String(length=66), nullable=True),
        sa.Column("holds", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("run_id", "round", "node", name="uq_segment_bisection"),
    )
    op.create_index("ix_segment_bisection_run_id", "segment_bisection", ["run_id"])
    op.create_index("ix_segment_bisection_node", "segment_bisection", ["node"])


def downgrade() -> None:
    op.drop_index("ix_segment_bisection_node", table_name="segment_bisection")
    op.drop_index("ix_segment_bisection_run_id", table_name="segment_bisection")
    op.drop_table("segment_bisection")
    with op.batch_alter_table("boundary_request") as batch:
        batch.drop_constraint("uq_boundary_request", type_="unique")
        batch.create_unique_constraint("uq_boundary_request", OLD)
        batch.drop_column("at_step")
