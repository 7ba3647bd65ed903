"""attestation.trace_root and boundary_request: a round's committed trace, served on demand

ComputeAttestation gained ``traceRoot`` (reference/trace.py): the root over the hashes of the
node's state every ``traceInterval`` inner steps, against which the ledger checks a boundary it
asks the node for. Rows signed before the field existed get the zero root (no boundary of theirs
can be served). ``boundary_request`` records each boundary the ledger asks a node for, its
deadline, and what was delivered (docs/ledger.md "Boundaries served on demand").

Revision ID: 0013_attestation_trace_root
Revises: 0012_round_join_node
Create Date: 2026-12-03 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_attestation_trace_root"
down_revision = "0012_round_join_node"
branch_labels = None
depends_on = None

ZERO = "0x" + "00" * 32


def upgrade() -> None:
    with op.batch_alter_table("attestation") as batch:
        batch.add_column(
            sa.Column("trace_root", sa.String(length=66), nullable=False, server_default=ZERO)
        )
    with op.batch_alter_table("attestation") as batch:
        batch.alter_column("trace_root", server_default=None)
    op.create_table(
        "boundary_request",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("boundary", sa.BigInteger(), nullable=False),
        sa.Column("trace_root", sa.String(length=66), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("state_hash", sa.String(length=66), nullable=True),
        sa.Column("sketch_hash", sa.String(length=66), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("run_id", "round", "node", "boundary", name="uq_boundary_request"),
    )
    op.create_index("ix_boundary_request_node_state", "boundary_request", ["node", "state"])


def downgrade() -> None:
    op.drop_index("ix_boundary_request_node_state", table_name="boundary_request")
    op.drop_table("boundary_request")
    with op.batch_alter_table("attestation") as batch:
        batch.drop_column("trace_root")
