"""GET /v1/rewards/{address}: cumulative amount, proof vs the latest committed root, receipts.

Each answer says where the proof's root stands (pending in its dispute window, finalized and
claimable, or revoked) and from when it pays; each receipt says the same of its round's root."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, or_, select
from web3 import Web3

from ledger.api.deps import LedgerDep, SessionDep
from ledger.api.errors import json_response
from ledger.models import Attestation, ChainCommit, RoundState, Settlement
from ledger.receipts import other_kinds
from ledger.schemas import RewardsOut
from ledger.service import Ledger
from ledger.settlement import tree_of
from protocol.merkle import RewardsTree
from protocol.types import Address

router = APIRouter(prefix="/rewards", tags=["rewards"])

_ATT = Attestation.__table__  # type: ignore[attr-defined]
_RECEIPT_COLUMNS = tuple(
    _ATT.c[name]
    for name in (
        "id", "run_id", "round", "node", "payout", "tokens", "verified_tokens", "quality",
        "reward", "verified", "reason",
    )
)  # fmt: skip


def _tree(
    session: Session, ledger: Ledger, settlement_id: int
) -> tuple[dict[str, int], RewardsTree | None]:
    """The amounts and tree of a committed settlement, built once per settlement (not per
    request): a settlement's tree never changes once written."""
    cache = ledger.tree_cache
    cached = cache.get(settlement_id)
    if cached is None:
        text = session.exec(select(Settlement.tree).where(Settlement.id == settlement_id)).one()
        amounts = {a: int(v) for a, v in json.loads(text)}
        cached = (amounts, tree_of(amounts))
        cache.clear()  # only the latest is asked for
        cache[settlement_id] = cached
    return cached


@router.get("/{address}", response_model=RewardsOut)
def get_rewards(
    address: Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")],
    session: SessionDep,
    ledger: LedgerDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="newest receipts returned")] = 100,
) -> Response:
    """What ``RewardDistributor.claim(account, cumulative_amount, proof)`` needs, and why."""
    account = Web3.to_checksum_address(address)
    latest = session.exec(
        select(Settlement.id, Settlement.rewards_root)
        .where(col(Settlement.status).in_(("mined", "final")))
        .order_by(col(Settlement.id).desc())
    ).first()
    amount, proof, root = 0, [], None
    if latest is not None:
        settlement_id, root = latest
        assert settlement_id is not None
        amounts, tree = _tree(session, ledger, settlement_id)
        if tree is not None and account in amounts:
            amount = amounts[account]
            proof = ["0x" + p.hex() for p in tree.proof(Address(account))]
    root_state, claimable_at = ledger.indexer.snapshot.root_state(root)
    nodes = [n.address for n in ledger.indexer.snapshot.nodes.values() if n.payout == account]
    atts = session.execute(
        sa_select(*_RECEIPT_COLUMNS)
        .where(or_(_ATT.c.payout == account, _ATT.c.node.in_(nodes or [account])))
        .order_by(_ATT.c.id.desc())
        .limit(limit)
    ).all()[::-1]
    states = {
        (run, rnd): state
        for run, rnd, state in session.exec(
            select(RoundState.run_id, RoundState.round, RoundState.state).where(
                col(RoundState.run_id).in_({a.run_id for a in atts} or {""}),
                col(RoundState.round).in_({a.round for a in atts} or {-1}),
            )
        ).all()
    }
    snap = ledger.indexer.snapshot
    round_roots = {
        (run, rnd): snap.root_state(root)
        for run, rnd, root in session.exec(
            select(ChainCommit.run_id, ChainCommit.round, ChainCommit.rewards_root).where(
                col(ChainCommit.run_id).in_({a.run_id for a in atts} or {""}),
                col(ChainCommit.round).in_({a.round for a in atts} or {-1}),
            )
        ).all()
    }
    receipts = []
    for a in atts:  # plain data, as Receipt and RewardsOut write it (no model per row)
        if a.payout not in (None, account):
            continue
        key = (a.run_id, a.round)
        root_of = round_roots.get(key, (None, None))
        receipts.append(
            {
                "run_id": a.run_id,
                "round": a.round,
                "node": a.node,
                "claimed_tokens": a.tokens,
                "verified_tokens": a.verified_tokens,
                "quality": a.quality,
                "reward": a.reward or "0",
                "verified": a.verified,
                "reason": a.reason or "round not scored yet",
                "round_state": states.get(key, "open"),
                "root_state": root_of[0],
                "claimable_at": root_of[1],
            }
        )
    return json_response(
        {
            "account": account,
            "cumulative_amount": str(amount),
            "proof": proof,
            "root": root,
            "root_committed": latest is not None,
            "root_state": root_state,
            "claimable_at": claimable_at,
            "receipts": receipts,
            "other_kinds": other_kinds(ledger, session, account),
        }
    )
