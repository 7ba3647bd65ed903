"""GET /v1/rewards/{address}: cumulative amount, proof vs the latest committed root, receipts."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path
from sqlmodel import col, or_, select
from web3 import Web3

from ledger.api.deps import LedgerDep, SessionDep
from ledger.contributions import other_kinds
from ledger.models import Attestation, RoundState
from ledger.schemas import Receipt, RewardsOut
from ledger.settlement import latest_committed, tree_of
from protocol.types import Address

router = APIRouter(prefix="/rewards", tags=["rewards"])


@router.get("/{address}", response_model=RewardsOut)
def get_rewards(
    address: Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")],
    session: SessionDep,
    ledger: LedgerDep,
) -> RewardsOut:
    """What ``RewardDistributor.claim(account, cumulative_amount, proof)`` needs, and why."""
    account = Web3.to_checksum_address(address)
    latest = latest_committed(session)
    amount, proof, root = 0, [], None
    if latest is not None:
        root = latest.rewards_root
        amounts = {a: int(v) for a, v in json.loads(latest.tree)}
        tree = tree_of(amounts)
        if tree is not None and account in amounts:
            amount = amounts[account]
            proof = ["0x" + p.hex() for p in tree.proof(Address(account))]
    nodes = [n.address for n in ledger.indexer.snapshot.nodes.values() if n.payout == account]
    atts = session.exec(
        select(Attestation)
        .where(
            or_(col(Attestation.payout) == account, col(Attestation.node).in_(nodes or [account]))
        )
        .order_by(col(Attestation.run_id), col(Attestation.round))
    ).all()
    states = {
        (r.run_id, r.round): r.state
        for r in session.exec(
            select(RoundState).where(col(RoundState.run_id).in_({a.run_id for a in atts} or {""}))
        ).all()
    }
    receipts = [
        Receipt(
            run_id=a.run_id,
            round=a.round,
            node=a.node,
            claimed_tokens=a.tokens,
            verified_tokens=a.verified_tokens,
            quality=a.quality,
            reward=a.reward or "0",
            verified=a.verified,
            reason=a.reason or "round not scored yet",
            round_state=states.get((a.run_id, a.round), "open"),
        )
        for a in atts
        if a.payout in (None, account)
    ]
    return RewardsOut(
        account=account,
        cumulative_amount=str(amount),
        proof=proof,
        root=root,
        root_committed=latest is not None,
        receipts=receipts,
        other_kinds=other_kinds(ledger, session, account),
    )
