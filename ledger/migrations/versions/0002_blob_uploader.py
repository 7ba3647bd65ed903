"""blob.uploader: which node uploaded a blob (its quota)

Revision ID: 0002_blob_uploader
Revises: 0001
Create Date: 2026-11-30 15:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_blob_uploader"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("blob", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uploader", sa.String(length=42), nullable=True))
        batch_op.create_index(batch_op.f("ix_blob_uploader"), ["uploader"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("blob", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_blob_uploader"))
        batch_op.drop_column("uploader")
