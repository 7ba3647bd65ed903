"""payout totals: cumulative rewards per payout, kept by scoring (settlement cost flat in history)

Revision ID: 0005_payout_totals
Revises: 0004_joins_frauds
Create Date: 2026-11-30 16:55:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_payout_totals"
down_revision = "0004_joins_frauds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "payout_total",
        sa.Column("payout", sa.String(length=42), nullable=False),
        sa.Column("amount", sa.String(length=80), nullable=False),
        sa.PrimaryKeyConstraint("payout"),
    )
    # the history so far, summed in Python (amounts exceed 64 bits: no SQL SUM over strings)
    totals: dict[str, int] = {}
    rows = op.get_bind().execute(
        sa.text(
            "SELECT payout, reward FROM attestation WHERE payout IS NOT NULL AND reward IS NOT NULL"
        )
    )
    for payout, reward in rows:
        if int(reward) > 0:
            totals[payout] = totals.get(payout, 0) + int(reward)
    if totals:
        op.bulk_insert(table, [{"payout": p, "amount": str(v)} for p, v in sorted(totals.items())])


def downgrade() -> None:
    op.drop_table("payout_total")
