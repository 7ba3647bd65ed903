"""GET /v1/nodes/{address}: registration, stake, rounds worked, rejections (audit trail)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from sqlmodel import col, func, select
from web3 import Web3

from ledger.api.deps import LedgerDep, SessionDep
from ledger.models import Attestation, Rejection
from ledger.schemas import NodeOut

router = APIRouter(prefix="/nodes", tags=["nodes"])

AddressPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")]


@router.get("/{address}", response_model=NodeOut)
def get_node(
    address: AddressPath,
    session: SessionDep,
    ledger: LedgerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> NodeOut:
    addr = Web3.to_checksum_address(address)
    snap = ledger.indexer.snapshot
    node = snap.nodes.get(addr)
    keys = snap.keys_of(addr)  # a rotated node's history stays whole under its node id
    atts = session.exec(
        select(Attestation)
        .where(col(Attestation.node).in_(keys))
        .order_by(col(Attestation.id).desc())
        .limit(limit)
    ).all()
    rejections = session.exec(
        select(Rejection)
        .where(col(Rejection.node).in_({*keys, address}))
        .order_by(col(Rejection.id).desc())
        .limit(limit)
    ).all()
    worked = session.exec(
        select(func.count())
        .select_from(Attestation)
        .where(col(Attestation.node).in_(keys), col(Attestation.verified).is_(True))
    ).one()
    return NodeOut(
        address=addr,
        node_id=snap.node_id_of(addr),
        keys=keys,
        registered=bool(node and node.registered),
        operator=node.operator if node else None,
        payout=node.payout if node else None,
        staked=node.staked if node else "0",
        unbonding=node.unbonding if node else "0",
        active=snap.is_active(addr),
        rounds_worked=int(worked),
        rounds=[
            {
                "run_id": a.run_id,
                "round": a.round,
                "node": a.node,
                "id": a.id,
                "tokens": a.tokens,
                "verified": a.verified,
                "verified_tokens": a.verified_tokens,
                "quality": a.quality,
                "reward": a.reward,
                "reason": a.reason,
            }
            for a in atts
        ],
        rejections=[
            {
                "run_id": r.run_id,
                "round": r.round,
                "code": r.code,
                "message": r.message,
                "digest": r.digest,
                "at": r.created_at.isoformat(),
            }
            for r in rejections
        ],
    )
