"""Receipts of the code and capital kinds, and ETH for compute, for one address.

``GET /v1/rewards/{address}`` serves the compute receipts from the ledger's database; this adds
the other two kinds from the chain's events (the contracts are the record: ``CodeRegistry``'s
submissions and decisions, ``RunFunding``'s deposits and vested claims) and, per funded run, the
ETH the address earned for compute under the latest ETH root.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, col, select

from ledger.models import Attestation
from protocol.errors import ColocoError

if TYPE_CHECKING:
    from ledger.service import Ledger

log = logging.getLogger(__name__)


def _logs(ledger: Ledger, contract: str, event: str, **filters: Any) -> list[Any]:
    client = ledger.chain.client
    ev = getattr(client.contract(contract).events, event)
    logs: list[Any] = ev.get_logs(
        from_block=ledger.chain.deployment_block, argument_filters=filters
    )
    return logs


def other_kinds(ledger: Ledger, session: Session, account: str) -> dict[str, Any]:
    """{"code": [...], "capital": [...], "eth_for_compute": [...]} receipts of `account`."""
    contracts = ledger.chain.deployment.contracts
    out: dict[str, Any] = {"code": [], "capital": [], "eth_for_compute": []}
    try:
        if "CodeRegistry" in contracts:
            for e in _logs(ledger, "CodeRegistry", "Submitted", contributor=account):
                cid = int(e["args"]["id"])
                c, _ = ledger.chain.client.call("CodeRegistry", "contributionOf", cid)
                rejected = _logs(ledger, "CodeRegistry", "Rejected", id=cid)
                out["code"].append(
                    {
                        "id": cid,
                        "run_id": "0x" + bytes(e["args"]["runId"]).hex(),
                        "repository_uri": e["args"]["repositoryUri"],
                        "status": ("none", "pending", "approved", "rejected", "claimed")[int(c[1])],
                        "amount": str(c[2]),
                        "reason": rejected[0]["args"]["reason"] if rejected else None,
                    }
                )
        if "RunFunding" in contracts:
            runs: dict[str, int] = {}
            for e in _logs(ledger, "RunFunding", "Deposited", backer=account):
                rid = "0x" + bytes(e["args"]["runId"]).hex()
                runs[rid] = runs.get(rid, 0) + int(e["args"]["amount"])
            for rid, deposited in runs.items():
                run = bytes.fromhex(rid[2:])
                client = ledger.chain.client
                out["capital"].append(
                    {
                        "run_id": rid,
                        "deposited_wei": str(deposited),
                        "entitlement": str(client.call("RunFunding", "entitlement", run, account)),
                        "vested": str(client.call("RunFunding", "vested", run, account)),
                        "claimed": str(client.call("RunFunding", "capitalClaimed", run, account)),
                    }
                )
            worked = session.exec(
                select(Attestation.run_id).where(col(Attestation.payout) == account).distinct()
            ).all()
            for rid in worked:
                _, amounts, rnd = ledger.funding.tree(rid)
                if account in amounts:
                    out["eth_for_compute"].append(
                        {"run_id": rid, "round": rnd, "cumulative_wei": str(amounts[account])}
                    )
    except ColocoError as exc:  # the chain is down: compute receipts still serve
        log.warning("code/capital receipts of %s unavailable: %s", account, exc)
        out["error"] = str(exc)
    return out
