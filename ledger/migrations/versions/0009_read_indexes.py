"""Indexes for the polled reads: (node, id), (payout, id), verified rows; redundant run_id ones go

The polled reads ask for a node's or a payout's newest rows (``ORDER BY id DESC LIMIT n``). With
an index on ``node`` (or ``payout``) alone PostgreSQL fetched every row of the node and sorted
them: 5.9 ms for a node's 20 newest of 1,510 (``bench.ledger``'s reads phase, EXPLAIN ANALYZE),
growing with its history. With the id in the index it reads the n newest in order. A node's
rounds worked are counted from a partial index of its verified rows. The single-column run_id
indexes of attestation, ledger_round and chaincommit go: their unique (run_id, round, ...)
indexes serve every lookup by run, each index is written at every insert, and with both there
PostgreSQL looked a receipt's round up through the run_id index and filtered every round of the
run (a rewards read: 20 x 1,510 rows).

Revision ID: 0009_read_indexes
Revises: 0008_attestation_pg_index
Create Date: 2026-12-01 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_read_indexes"
down_revision = "0008_attestation_pg_index"
branch_labels = None
depends_on = None

VERIFIED = "verified IS TRUE"


def upgrade() -> None:
    op.create_index("ix_attestation_node_id", "attestation", ["node", "id"])
    op.create_index("ix_attestation_payout_id", "attestation", ["payout", "id"])
    op.create_index(
        "ix_attestation_node_verified",
        "attestation",
        ["node"],
        postgresql_where=sa.text(VERIFIED),
        sqlite_where=sa.text(VERIFIED),
    )
    op.create_index("ix_rejection_node_id", "rejection", ["node", "id"])
    op.drop_index("ix_attestation_node", table_name="attestation")
    op.drop_index("ix_attestation_payout", table_name="attestation")
    op.drop_index("ix_attestation_run_id", table_name="attestation")
    op.drop_index("ix_rejection_node", table_name="rejection")
    op.drop_index("ix_ledger_round_run_id", table_name="ledger_round")
    op.drop_index("ix_chaincommit_run_id", table_name="chaincommit")


def downgrade() -> None:
    op.create_index("ix_chaincommit_run_id", "chaincommit", ["run_id"])
    op.create_index("ix_ledger_round_run_id", "ledger_round", ["run_id"])
    op.create_index("ix_rejection_node", "rejection", ["node"])
    op.create_index("ix_attestation_run_id", "attestation", ["run_id"])
    op.create_index("ix_attestation_payout", "attestation", ["payout"])
    op.create_index("ix_attestation_node", "attestation", ["node"])
    op.drop_index("ix_rejection_node_id", table_name="rejection")
    op.drop_index("ix_attestation_node_verified", table_name="attestation")
    op.drop_index("ix_attestation_payout_id", table_name="attestation")
    op.drop_index("ix_attestation_node_id", table_name="attestation")
