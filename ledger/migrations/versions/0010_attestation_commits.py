"""attestation.commits: the members' signed packet commitments a node averaged (evidence)

A node hands the ledger the signed ``COMMIT`` messages of the round's members with its
attestation (trainer.round.commits); a member that signed one packet there and attested another
is failed on its own signature (ledger.judge.commits).

Revision ID: 0010_attestation_commits
Revises: 0009_read_indexes
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_attestation_commits"
down_revision = "0009_read_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attestation", sa.Column("commits", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("attestation", "commits")
