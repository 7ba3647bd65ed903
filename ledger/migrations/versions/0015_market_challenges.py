"""market_challenge, market_challenge_device: the compute market's timed hardware challenges

A node asks to be challenged on a claim (device kind and count, memory and throughput per
device); the ledger keeps the seed, one nonce per device, the deadline, each device's
commitment and the verdict with the measured throughput, memory and device count that an offer
carries (reference/challenge.py, ledger/intake/challenges.py).

Revision ID: 0015_market_challenges
Revises: 0012_round_join_node
Create Date: 2026-12-03 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_market_challenges"
down_revision = "0014_market_offers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "market_challenge",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("node", sa.String(42), nullable=False),
        sa.Column("request", sa.String(66), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("seed", sa.String(66), nullable=False),
        sa.Column("secret", sa.String(66), nullable=False),
        sa.Column("slack", sa.Float(), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("measured_flops", sa.BigInteger(), nullable=True),
        sa.Column("measured_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("measured_devices", sa.Integer(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("request"),
    )
    op.create_index("ix_market_challenge_node", "market_challenge", ["node"])
    op.create_index("ix_market_challenge_verdict", "market_challenge", ["verdict"])
    op.create_table(
        "market_challenge_device",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("challenge_id", sa.Integer(), nullable=False),
        sa.Column("device", sa.Integer(), nullable=False),
        sa.Column("nonce", sa.String(66), nullable=False),
        sa.Column("root", sa.String(66), nullable=True),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.UniqueConstraint("challenge_id", "device", name="uq_market_challenge_device"),
    )


def downgrade() -> None:
    op.drop_table("market_challenge_device")
    op.drop_index("ix_market_challenge_verdict", table_name="market_challenge")
    op.drop_index("ix_market_challenge_node", table_name="market_challenge")
    op.drop_table("market_challenge")
