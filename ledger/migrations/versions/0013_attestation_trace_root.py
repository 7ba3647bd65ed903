"""attestation.trace_root: the Merkle root of a round's boundary states (signed)

ComputeAttestation gained ``traceRoot`` (reference/trace.py): the root over the hashes of the
node's state every ``traceInterval`` inner steps, against which the ledger checks a boundary it
asks the node for. Rows signed before the field existed get the zero root (no boundary of theirs
can be served).

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


def downgrade() -> None:
    with op.batch_alter_table("attestation") as batch:
        batch.drop_column("trace_root")
