"""run.name: the name an organiser opened a run with (its id is the name's sha256)

The dashboard shows a run by its name (`demo`), its hex id only as a secondary label.

Revision ID: 0011_run_name
Revises: 0010_attestation_commits
Create Date: 2026-12-03 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_run_name"
down_revision = "0010_attestation_commits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("name", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("name")
