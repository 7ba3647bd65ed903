"""initial ledger schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 03:03:29.353657
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "attestation",
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=False),
        sa.Column("config_version", sa.BigInteger(), nullable=False),
        sa.Column("base_checkpoint", sa.String(length=66), nullable=False),
        sa.Column("pseudo_gradient", sa.String(length=66), nullable=False),
        sa.Column("data_shard", sa.String(length=66), nullable=False),
        sa.Column("inner_steps", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("result_checkpoint", sa.String(length=66), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=66), nullable=False),
        sa.Column("signature", sa.String(length=132), nullable=False),
        sa.Column("members", sa.Text(), nullable=True),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.Column("payout", sa.String(length=42), nullable=True),
        sa.Column("verified", sa.Boolean(), nullable=True),
        sa.Column("verified_tokens", sa.BigInteger(), nullable=True),
        sa.Column("quality", sa.Float(), nullable=True),
        sa.Column("reward", sa.String(length=80), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
        sa.UniqueConstraint("run_id", "round", "node", name="uq_attestation_slot"),
    )
    with op.batch_alter_table("attestation", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attestation_node"), ["node"], unique=False)
        batch_op.create_index(batch_op.f("ix_attestation_payout"), ["payout"], unique=False)
        batch_op.create_index(batch_op.f("ix_attestation_run_id"), ["run_id"], unique=False)

    op.create_table(
        "blob",
        sa.Column("hash", sa.String(length=66), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("hash"),
    )
    op.create_table(
        "chaincommit",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("rewards_root", sa.String(length=66), nullable=False),
        sa.Column("checkpoint", sa.String(length=66), nullable=False),
        sa.Column("total_work", sa.String(length=80), nullable=False),
        sa.Column("attestations_root", sa.String(length=66), nullable=False),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        sa.Column("tx_hash", sa.String(length=66), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round", name="uq_chain_commit"),
    )
    with op.batch_alter_table("chaincommit", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chaincommit_run_id"), ["run_id"], unique=False)

    op.create_table(
        "keyvalue",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "ledger_round",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("opened_at", sa.DateTime(), nullable=False),
        sa.Column("deadline_at", sa.DateTime(), nullable=False),
        sa.Column("closed_at", sa.DateTime(), nullable=True),
        sa.Column("expected", sa.Text(), nullable=True),
        sa.Column("checkpoint", sa.String(length=66), nullable=True),
        sa.Column("total_work", sa.String(length=80), nullable=True),
        sa.Column("rewards_root", sa.String(length=66), nullable=True),
        sa.Column("attestations_root", sa.String(length=66), nullable=True),
        sa.Column("reward_per_round", sa.String(length=80), nullable=True),
        sa.Column("tx_hash", sa.String(length=66), nullable=True),
        sa.Column("block_number", sa.BigInteger(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round", name="uq_round"),
    )
    with op.batch_alter_table("ledger_round", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ledger_round_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_ledger_round_state"), ["state"], unique=False)

    op.create_table(
        "node",
        sa.Column("address", sa.String(length=42), nullable=False),
        sa.Column("operator", sa.String(length=42), nullable=False),
        sa.Column("payout", sa.String(length=42), nullable=False),
        sa.Column("staked", sa.String(length=80), nullable=False),
        sa.Column("unbonding", sa.String(length=80), nullable=False),
        sa.Column("registered", sa.Boolean(), nullable=False),
        sa.Column("updated_block", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("address"),
    )
    op.create_table(
        "rejection",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=42), nullable=True),
        sa.Column("run_id", sa.String(length=66), nullable=True),
        sa.Column("round", sa.String(length=24), nullable=True),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=66), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("rejection", schema=None) as batch_op:
        batch_op.create_index("ix_rejection_node", ["node"], unique=False)

    op.create_table(
        "run",
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("genesis_checkpoint", sa.String(length=66), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "settlement",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=66), nullable=False),
        sa.Column("round", sa.BigInteger(), nullable=False),
        sa.Column("rewards_root", sa.String(length=66), nullable=False),
        sa.Column("checkpoint", sa.String(length=66), nullable=False),
        sa.Column("total_work", sa.String(length=80), nullable=False),
        sa.Column("attestations_root", sa.String(length=66), nullable=False),
        sa.Column("tree", sa.Text(), nullable=False),
        sa.Column("nonce", sa.BigInteger(), nullable=True),
        sa.Column("tx_hash", sa.String(length=66), nullable=True),
        sa.Column("raw_tx", sa.Text(), nullable=True),
        sa.Column("block_number", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "round", name="uq_settlement"),
    )


def downgrade() -> None:

    op.drop_table("settlement")
    op.drop_table("run")
    with op.batch_alter_table("rejection", schema=None) as batch_op:
        batch_op.drop_index("ix_rejection_node")

    op.drop_table("rejection")
    op.drop_table("node")
    with op.batch_alter_table("ledger_round", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ledger_round_state"))
        batch_op.drop_index(batch_op.f("ix_ledger_round_run_id"))

    op.drop_table("ledger_round")
    op.drop_table("keyvalue")
    with op.batch_alter_table("chaincommit", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chaincommit_run_id"))

    op.drop_table("chaincommit")
    op.drop_table("blob")
    with op.batch_alter_table("attestation", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attestation_run_id"))
        batch_op.drop_index(batch_op.f("ix_attestation_payout"))
        batch_op.drop_index(batch_op.f("ix_attestation_node"))

    op.drop_table("attestation")
