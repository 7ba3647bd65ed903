"""GET /v1/funding/{run_id}/eth/{address}: what ``RunFunding.claimEth`` needs, and the run.

Served from the indexed events only (ledger/reads/receipts.py, ledger/reads/trees.py), as of the
indexer's cursor block.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from web3 import Web3

from ledger.api.deps import EthTreesDep, SessionDep
from ledger.api.errors import errors
from ledger.reads.receipts import as_of, latest_root, run_view
from protocol.types import Address

router = APIRouter(prefix="/funding", tags=["funding"])

_HEX32 = r"^0x[0-9a-fA-F]{64}$"
_ADDRESS = r"^0x[0-9a-fA-F]{40}$"


@router.get("/{run_id}/eth/{address}", responses=errors(422, 503))
def get_eth_claim(
    run_id: Annotated[str, Path(pattern=_HEX32)],
    address: Annotated[str, Path(pattern=_ADDRESS)],
    session: SessionDep,
    trees: EthTreesDep,
) -> dict[str, Any]:
    """The cumulative wei ``address`` earned for compute in ``run_id`` under the latest indexed
    ETH root, its proof and that root (claimable once its dispute window has passed)."""
    account = Web3.to_checksum_address(address)
    run_id = run_id.lower()
    if not trees.enabled:
        return {"run_id": run_id, "account": account, "funded": False}
    run = run_view(session, run_id)
    tree, amounts, rnd = trees.tree(session, run_id)
    amount = amounts.get(account, 0)
    proof = ["0x" + p.hex() for p in tree.proof(Address(account))] if tree and amount else []
    root = latest_root(session, run_id)
    block, when = as_of(session)
    return {
        "run_id": run_id,
        "account": account,
        "funded": run is not None,
        "round": rnd,
        "root": "0x" + tree.root.hex() if tree is not None else None,
        "claimable_from": root["claimable_from"] if root is not None else None,
        "revoked": root["revoked"] if root is not None else False,
        "cumulative_wei": str(amount),
        "proof": proof,
        "run": run.as_json() if run is not None else None,
        "as_of": {"block": block, "time": when},
    }
