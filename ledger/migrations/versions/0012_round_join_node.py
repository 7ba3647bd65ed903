"""ix_round_join_node: a node's joins, newest first

`GET /v1/nodes/{address}` lists the rounds a node joined and never attested (`missed_rounds`);
without this index that read walks every join of every node.

Revision ID: 0012_round_join_node
Revises: 0011_run_name
Create Date: 2026-12-03 15:45:00
"""

from __future__ import annotations

from alembic import op

revision = "0012_round_join_node"
down_revision = "0011_run_name"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_round_join_node", "round_join", ["node", "id"])


def downgrade() -> None:
    op.drop_index("ix_round_join_node", table_name="round_join")
