"""POST /v1/joins (a node's signed join of a round), GET a round's members, the ledger's outer
state of a round (weights + momentum blobs, for nodes to resync), and the fraud records."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict
from sqlmodel import col, select
from starlette.concurrency import run_in_threadpool

from ledger.api.deps import (
    JSON_BODY,
    ClosuresDep,
    DomainDep,
    MembershipDep,
    RoundBookDep,
    SessionDep,
    SettingsDep,
    SnapshotDep,
)
from ledger.api.errors import errors, json_response
from ledger.core.models import FraudRecord, KeyValue, RoundState, utcnow
from ledger.core.schemas import AddressStr, Hex32, RoundIn, SignatureHex, SignedAddress
from ledger.intake.verify import reject
from ledger.judge.bisect import verdict_of_fraud
from ledger.judge.outer_step import momentum_key
from protocol.errors import EncodingError, LedgerError
from protocol.join import RoundJoin

router = APIRouter(tags=["membership"])

RunIdPath = Annotated[str, Path(pattern=r"^0x[0-9a-fA-F]{64}$")]


class JoinFields(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    runId: Hex32  # noqa: N815 - EIP-712 field names
    round: RoundIn
    node: SignedAddress


class JoinIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    join: JoinFields
    signature: SignatureHex


@router.post(
    "/joins",
    status_code=202,
    responses=errors(400, 403, 404, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
async def post_join(
    body: JoinIn,
    *,
    closures: ClosuresDep,
    book: RoundBookDep,
    membership: MembershipDep,
    domain: DomainDep,
    snapshot: SnapshotDep,
    settings: SettingsDep,
) -> Any:
    """Join a round before it starts: its members are the nodes whose join was recorded."""
    try:
        join = RoundJoin.from_json(body.join.model_dump())
    except EncodingError as exc:
        raise reject("invalid_field", str(exc)) from None
    run = "0x" + join.run_id.hex()
    closures.check(run, int(join.round))
    state = book.state((run, int(join.round)))
    members = await run_in_threadpool(
        membership.join,
        join,
        body.signature,
        domain,
        snapshot,
        round_window=settings.round_window,
        round_state=state,
    )
    return json_response(
        {
            "status": "joined",
            "round": join.round,
            "members": sorted(members.joined),
            "starts_at": members.starts_at.isoformat() if members.starts_at else None,
        },
        202,
    )


@router.get("/runs/{run_id}/rounds/{round}/members", responses=errors(422, 503))
def get_members(
    run_id: RunIdPath, round: Annotated[int, Path(ge=0, lt=1 << 63)], membership: MembershipDep
) -> Any:
    """The nodes whose join of ``round`` was recorded; ``started``: the members are final (the
    ledger's own clock, so a trainer never compares ``starts_at`` with a clock of its own)."""
    state = membership.state(run_id.lower(), round)
    return {
        "members": sorted(state.joined),
        "starts_at": state.starts_at.isoformat() if state.starts_at else None,
        "started": state.started(utcnow()),
    }


@router.get("/runs/{run_id}/outer/{round}", responses=errors(404, 422, 503))
def get_outer(
    run_id: RunIdPath, round: Annotated[int, Path(ge=0, lt=1 << 63)], session: SessionDep
) -> Any:
    """The committed weights and the outer momentum the ledger computed for a round."""
    run = run_id.lower()
    rnd = session.exec(
        select(RoundState).where(RoundState.run_id == run, RoundState.round == round)
    ).first()
    mom = session.get(KeyValue, momentum_key(run, round))
    if rnd is None or rnd.checkpoint is None:
        raise LedgerError(f"round {round} of run {run} has no checkpoint yet", code="not_found")
    return {"checkpoint": rnd.checkpoint, "momentum": mom.value if mom else None}


@router.get("/frauds", responses=errors(422, 503))
def list_frauds(session: SessionDep, node: AddressStr | None = None) -> Any:
    """Failed replay audits with their evidence (newest first)."""
    stmt = select(FraudRecord).order_by(col(FraudRecord.id).desc()).limit(500)
    if node is not None:
        stmt = stmt.where(col(FraudRecord.node) == node)
    return [
        {
            "id": f.id,
            "run_id": f.run_id,
            "round": f.round,
            "node": f.node,
            "digest": f.digest,
            "evidence_hash": f.evidence_hash,
            "evidence": json.loads(f.evidence),
            "withheld": f.withheld,
            "slash_tx": f.slash_tx,
            "at": f.created_at.isoformat(),
        }
        for f in session.exec(stmt).all()
    ]


@router.get("/frauds/{fraud_id}/verdict", responses=errors(404, 422, 503))
def get_verdict(fraud_id: Annotated[int, Path(ge=1, lt=1 << 63)], session: SessionDep) -> Any:
    """The one-step verdict of fraud record ``fraud_id``'s failed segment (ledger.judge.bisect):
    its evidence (reference.verdict; the blobs it names are served at ``/v1/blobs/{hash}``), or
    the bisection's state while it runs. ``coloco audit <fraud id>`` re-checks it."""
    row = verdict_of_fraud(session, fraud_id)
    if row is None:
        raise LedgerError(
            f"fraud record {fraud_id} has no bisected segment (GET /v1/frauds lists the records)",
            code="not_found",
        )
    return {
        "fraud_id": fraud_id,
        "state": row.state,
        "segment": [row.seg_lo, row.seg_hi],
        "interval": [row.lo, row.hi],
        "probe": row.probe,
        "holds": row.holds,
        "reason": row.reason,
        "evidence_hash": row.evidence_hash,
        "evidence": json.loads(row.evidence) if row.evidence else None,
    }
