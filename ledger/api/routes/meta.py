"""Health (liveness, readiness) and GET /v1/eip712.

No probe calls the chain or holds a pooled connection while waiting on anything but the
database: the chain head and indexer lag come from the indexer's snapshot (the background
worker's last look), the database check borrows a connection for one ``SELECT 1``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from sqlalchemy import Engine, text
from starlette.concurrency import run_in_threadpool

from ledger.api.deps import DomainDep, EngineDep, SnapshotDep, StatusDep
from ledger.api.errors import json_response
from ledger.chain.indexer import ChainSnapshot
from ledger.core.schemas import HealthOut, LiveOut
from ledger.core.secrets import redact
from ledger.reads.metrics import WorkerStatus
from protocol.attestation import ATTESTATION_SPEC

router = APIRouter(tags=["meta"])

MAX_INDEXER_LAG = 100


def _database(engine: Engine) -> str:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return "ok"
    except Exception as exc:  # report, do not fail the probe
        return f"error: {type(exc).__name__}"


async def _readiness(engine: Engine, snap: ChainSnapshot, worker: WorkerStatus) -> HealthOut:
    database = await run_in_threadpool(_database, engine)
    head, indexed = snap.head, snap.indexed_block
    lag = head - indexed if head is not None and indexed is not None else None
    detail: dict[str, Any] = {k: redact(v) for k, v in worker.problems().items()}
    # the leader indexes (within MAX_INDEXER_LAG blocks of the head); a follower checks
    # attestations against what the leader indexed
    leader_ok = lag is not None and lag <= MAX_INDEXER_LAG
    chain_ok = leader_ok if worker.leading else indexed is not None
    ok = database == "ok" and chain_ok and not detail
    return HealthOut(
        status="ok" if ok else "degraded",
        database=database,
        chain_head=head,
        indexed_block=indexed,
        indexer_lag=lag,
        detail=detail,
    )


@router.get("/health", response_model=HealthOut)
async def health(engine: EngineDep, snapshot: SnapshotDep, worker: StatusDep) -> HealthOut:
    """The readiness report, always answered 200 (for dashboards; probes use /health/ready)."""
    return await _readiness(engine, snapshot, worker)


@router.get("/health/live", response_model=LiveOut)
async def live() -> LiveOut:
    """Liveness: the process answers (no database, no chain). Restart the ledger if not."""
    return LiveOut(status="alive")


@router.get(
    "/health/ready",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "degraded: see detail"}},
)
async def ready(engine: EngineDep, snapshot: SnapshotDep, worker: StatusDep) -> Response:
    """Readiness: database reachable, indexer within 100 blocks, no failing step or round."""
    report = await _readiness(engine, snapshot, worker)
    return json_response(report.model_dump(), 200 if report.status == "ok" else 503)


@router.get("/eip712")
def eip712(domain: DomainDep) -> dict[str, Any]:
    """The domain, types and primaryType a wallet needs to sign a ComputeAttestation."""
    return ATTESTATION_SPEC.signing_schema(domain)
