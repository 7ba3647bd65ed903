"""attestation.pseudo_gradient indexed: a blob GET asks which rounds name it (BlobStore.hidden)

Revision ID: 0008_attestation_pg_index
Revises: 0007_funding_events
Create Date: 2026-11-30 19:35:00
"""

from __future__ import annotations

from alembic import op

revision = "0008_attestation_pg_index"
down_revision = "0007_funding_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_attestation_pseudo_gradient", "attestation", ["pseudo_gradient"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_attestation_pseudo_gradient", table_name="attestation")
