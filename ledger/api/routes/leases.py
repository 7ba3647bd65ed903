"""GET /v1/leases/{lease_id}: what ``ComputeLeases.claim`` and ``refund`` need, and the lease.

The lease's terms come from the indexed ``LeaseOpened`` event; its leaf, proof and root from the
latest committed settlement of its run (the root the ledger committed with the round: lease
payments ride in it, no transaction of their own). ``ended`` says the leaf counts through the
window's last round, so ``refund`` settles the lease with it once the root is claimable.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path
from sqlmodel import col, select

from ledger.api.deps import RewardsTreesDep, SessionDep, SnapshotDep
from ledger.api.errors import errors
from ledger.api.routes.rewards import settlement_tree
from ledger.chain.leases import completed_rounds, lease_terms
from ledger.core.models import Settlement
from protocol.merkle import lease_leaf_hash

router = APIRouter(prefix="/leases", tags=["leases"])

_HEX32 = r"^0x[0-9a-fA-F]{64}$"


@router.get("/{lease_id}", responses=errors(404, 422, 503))
def get_lease(
    lease_id: Annotated[str, Path(pattern=_HEX32)],
    session: SessionDep,
    snapshot: SnapshotDep,
    trees: RewardsTreesDep,
) -> dict[str, Any]:
    """The lease's terms, its leaf in the latest committed root (cumulative wei through a
    round), the proof, and where that root stands (pending, finalized, revoked)."""
    found = lease_terms(session, lease_id.lower())
    if not found:
        raise HTTPException(
            404,
            f"no lease {lease_id.lower()} indexed: check the id (`coloco market lease open` "
            "prints it), or wait for the ledger's indexer to reach its block",
        )
    lease = found[0]
    latest = session.exec(
        select(Settlement.id)
        .where(Settlement.run_id == lease.run_id, col(Settlement.status).in_(("mined", "final")))
        .order_by(col(Settlement.id).desc())
    ).first()
    leaf: dict[str, Any] | None = None
    if latest is not None and trees.leases is not None:
        conn = session.connection()
        _, tree, leaves = trees.built(latest, lambda: settlement_tree(conn, latest))
        mine = next((entry for entry in leaves if entry[0] == lease.lease_id), None)
        if tree is not None and mine is not None:
            _, wei, through = mine
            hashed = lease_leaf_hash(trees.leases, bytes.fromhex(lease.lease_id[2:]), wei, through)
            root = "0x" + tree.root.hex()
            state, claimable_at = snapshot.root_state(root)
            leaf = {
                "cumulative_wei": str(wei),
                "through_round": through,
                "rounds_completed": wei // lease.wei_per_round,
                "ended": through >= lease.end_round,
                "root": root,
                "root_state": state,
                "claimable_at": claimable_at,
                "proof": ["0x" + p.hex() for p in tree.extra_proof(hashed)],
            }
    return {
        **lease.as_json(),
        "contract": trees.leases,
        "leaf": leaf,
        "rounds_completed_so_far": completed_rounds(session, lease, lease.end_round),
    }
