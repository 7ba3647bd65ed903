"""GET /v1/health and GET /v1/eip712."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlalchemy import text

from ledger.api.deps import LedgerDep, SessionDep
from ledger.schemas import HealthOut
from protocol.attestation import ATTESTATION_FIELDS, PRIMARY_TYPE
from protocol.eip712 import EIP712_DOMAIN_FIELDS

router = APIRouter(tags=["meta"])


@router.get("/health", response_model=HealthOut)
def health(session: SessionDep, ledger: LedgerDep) -> HealthOut:
    """Database reachable, chain head, indexer lag (blocks behind the head)."""
    detail: dict[str, Any] = {}
    try:
        session.exec(text("SELECT 1"))  # type: ignore[call-overload]
        database = "ok"
    except Exception as exc:  # report, do not fail the probe
        database = f"error: {type(exc).__name__}"
    head: int | None
    try:
        head = ledger.chain.block_number()
    except Exception as exc:
        head = None
        detail["chain"] = str(exc)
    indexed = ledger.indexer.snapshot.indexed_block
    lag = head - indexed if head is not None and indexed is not None else None
    if ledger.last_error:
        detail["lifecycle"] = ledger.last_error
    ok = database == "ok" and head is not None and lag is not None and lag <= 100
    return HealthOut(
        status="ok" if ok else "degraded",
        database=database,
        chain_head=head,
        indexed_block=indexed,
        indexer_lag=lag,
        detail=detail,
    )


@router.get("/eip712")
def eip712(ledger: LedgerDep) -> dict[str, Any]:
    """The domain, types and primaryType a wallet needs to sign a ComputeAttestation."""
    return {
        "domain": ledger.chain.domain.to_json(),
        "types": {
            "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_DOMAIN_FIELDS],
            PRIMARY_TYPE: [{"name": n, "type": t} for _, n, t in ATTESTATION_FIELDS],
        },
        "primaryType": PRIMARY_TYPE,
    }
