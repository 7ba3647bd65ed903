"""GET /v1/nodes/{address}: registration, stake, rounds worked, rejections (audit trail)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from sqlalchemy import select as sa_select
from sqlmodel import col, func, select
from web3 import Web3

from ledger.api.deps import LedgerDep, SessionDep
from ledger.api.errors import json_response
from ledger.models import Attestation, Rejection
from ledger.schemas import NodeOut

router = APIRouter(prefix="/nodes", tags=["nodes"])

_ATT = Attestation.__table__  # type: ignore[attr-defined]
_REJ = Rejection.__table__  # type: ignore[attr-defined]
_ROUND_NAMES = (
    "run_id", "round", "node", "id", "tokens", "verified", "verified_tokens", "quality",
    "reward", "reason",
)  # fmt: skip
_ROUND_COLUMNS = tuple(_ATT.c[name] for name in _ROUND_NAMES)
_REJECTION_COLUMNS = tuple(
    _REJ.c[name] for name in ("run_id", "round", "code", "message", "digest", "created_at")
)

AddressPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{40}$")]


@router.get("/{address}", response_model=NodeOut)
def get_node(
    address: AddressPath,
    session: SessionDep,
    ledger: LedgerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    addr = Web3.to_checksum_address(address)
    snap = ledger.indexer.snapshot
    node = snap.nodes.get(addr)
    keys = snap.keys_of(addr)  # a rotated node's history stays whole under its node id
    atts = session.execute(
        sa_select(*_ROUND_COLUMNS)
        .where(_ATT.c.node.in_(keys))
        .order_by(_ATT.c.id.desc())
        .limit(limit)
    ).all()
    rejections = session.execute(
        sa_select(*_REJECTION_COLUMNS)
        .where(_REJ.c.node.in_({*keys, address}))
        .order_by(_REJ.c.id.desc())
        .limit(limit)
    ).all()
    worked = session.exec(
        select(func.count())
        .select_from(Attestation)
        .where(col(Attestation.node).in_(keys), col(Attestation.verified).is_(True))
    ).one()
    return json_response(  # plain data as NodeOut writes it (no ORM objects, no validation)
        {
            "address": addr,
            "node_id": snap.node_id_of(addr),
            "keys": keys,
            "registered": bool(node and node.registered),
            "operator": node.operator if node else None,
            "payout": node.payout if node else None,
            "staked": node.staked if node else "0",
            "unbonding": node.unbonding if node else "0",
            "active": snap.is_active(addr),
            "rounds_worked": int(worked),
            "rounds": [dict(zip(_ROUND_NAMES, a, strict=True)) for a in atts],
            "rejections": [
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
        }
    )
