"""market_offer: the compute market's signed offers

`POST /v1/market/offers` stores a node's signed ComputeOffer (protocol/offer.py); `GET
/v1/market/offers` and `POST /v1/market/requests` read them. One row per node: a higher
nonce replaces the node's offer.

Revision ID: 0014_market_offers
Revises: 0012_round_join_node (0013 lands from another branch: the merge sets it here)
Create Date: 2026-12-03 17:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_market_offers"
down_revision = "0013_attestation_trace_root"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "market_offer",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=66), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("operator", sa.String(length=42), nullable=False),
        sa.Column("device_kind", sa.String(length=66), nullable=False),
        sa.Column("device_count", sa.BigInteger(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("bandwidth", sa.BigInteger(), nullable=False),
        sa.Column("region", sa.String(length=66), nullable=False),
        sa.Column("price_per_device_hour", sa.String(length=80), nullable=False),
        sa.Column("min_hours", sa.BigInteger(), nullable=False),
        sa.Column("expiry", sa.BigInteger(), nullable=False),
        sa.Column("nonce", sa.BigInteger(), nullable=False),
        sa.Column("challenge", sa.String(length=66), nullable=False),
        sa.Column("signature", sa.String(length=132), nullable=False),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
        sa.UniqueConstraint("node"),
        sqlite_autoincrement=True,  # ids never reused: the offers' readers key on the highest
    )


def downgrade() -> None:
    op.drop_table("market_offer")
