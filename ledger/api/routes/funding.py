"""GET /v1/funding/{run_id}/eth/{address}: what ``RunFunding.claimEth`` needs, and the run."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from web3 import Web3

from ledger.api.deps import LedgerDep
from protocol.types import Address

router = APIRouter(prefix="/funding", tags=["funding"])

_HEX32 = r"^0x[0-9a-fA-F]{64}$"
_ADDRESS = r"^0x[0-9a-fA-F]{40}$"


@router.get("/{run_id}/eth/{address}")
def get_eth_claim(
    run_id: Annotated[str, Path(pattern=_HEX32)],
    address: Annotated[str, Path(pattern=_ADDRESS)],
    ledger: LedgerDep,
) -> dict[str, Any]:
    """The cumulative wei ``address`` earned for compute in ``run_id`` under the latest ETH root,
    its proof and that root (claimable once its dispute window has passed)."""
    account = Web3.to_checksum_address(address)
    run_id = run_id.lower()
    funding = ledger.funding
    if not funding.enabled:
        return {"run_id": run_id, "account": account, "funded": False}
    st = funding.state(run_id)
    tree, amounts, rnd = funding.tree(run_id)
    amount = amounts.get(account, 0)
    proof = ["0x" + p.hex() for p in tree.proof(Address(account))] if tree and amount else []
    return {
        "run_id": run_id,
        "account": account,
        "funded": st.funding_end != 0,
        "round": rnd,
        "root": "0x" + tree.root.hex() if tree is not None else None,
        "cumulative_wei": str(amount),
        "proof": proof,
        "run": {
            "funding_end": st.funding_end,
            "cancelled_at": st.cancelled_at,
            "total_deposited_wei": str(st.total_deposited),
            "eth_committed_wei": str(st.eth_committed),
            "eth_paid_wei": str(st.eth_paid),
            "eth_per_round_wei": str(st.eth_per_round),
            "capital_pool": str(st.capital_pool),
        },
    }
