"""A round's segment audits, public: what the ledger drew, what each audited node delivered, and
what the ledger decided, so that an independent auditor (``coloco audit --run-id``) can re-run
each drawn segment from the delivered states with the ledger's own code (ledger.judge.segments).

- ``GET /v1/runs/{run}/rounds/{round}/segment-audits[?node=0x..&limit=N]``: one object per
  node-round the ledger asked boundaries of (``BoundaryRequest`` rows of a full state or a
  sketch; a bisection's probes are not listed): the round's audit seed, the drawn segments and
  the boundaries' inner steps (``ledger.judge.segments.plan``, the ledger's function with its
  ``audit_segments`` and the run's ``traceInterval``), each requested boundary (index, full state
  or sketch, its state, step, state hash, sketch hash), boundary 0's delivered state hash (a
  round that did not start from its attested base: its origin), and the ledger's verdict on the
  node-round (``passed``, ``failed``, ``pending``), its reason and, for a failed segment, its
  error (the fraud record's ``segment_error``); the drawn segments whose one-step verdict holds
  (``excused``: the screen failed them, the verdict cleared them, ledger.judge.bisect).

Threat model. Who can read: anyone, no token, as every ``GET`` of rounds and blobs. The worst
case: nothing here is secret: the delivered states and sketches are in the blob store already
(``GET /v1/blobs/{hash}``), the seed is written into every audit receipt and fraud record, the
verdicts into the round's scores. The seed is served only once the round is past ``closing``
(``scored``, ``committed``, ``final``): while the ledger still judges it the seed names which
nodes are drawn, and withholding it costs the reader nothing it could check anyway. A reader
cannot make the ledger work: the route reads rows, never loads a blob or replays, and is bounded
(``limit`` node-rounds, at most :data:`AUDITS_LIMIT_MAX`; the boundaries of one node-round are
bounded by its plan: each drawn segment's two ends, boundary 0 and the last one). What it cannot
prove: the leaves. The ledger checked each delivery against the node's signed ``traceRoot`` with
the node's Merkle proof, which it does not keep; an auditor that does not trust this ledger's
word on the hashes still re-runs each segment from the blobs, so a ledger that served other
hashes could only make an honest node fail the public check, in public.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field
from sqlmodel import col, select

from ledger.api.deps import SessionDep, SettingsDep, SnapshotDep
from ledger.api.errors import errors
from ledger.api.routes.runs import RunIdPath
from ledger.core.models import (
    SKETCH_REQUEST,
    STATE_REQUEST,
    Attestation,
    BoundaryRequest,
    FraudRecord,
    RoundState,
)
from ledger.judge import bisect, segments
from ledger.judge.audits import stored_seed
from protocol.eip712 import to_checksum_address
from protocol.errors import LedgerError

router = APIRouter(tags=["audits"])

AUDITS_LIMIT, AUDITS_LIMIT_MAX = 100, 1000  # node-rounds per answer: the default, the largest
JUDGED = ("scored", "committed", "final")  # a round whose audit seed is public
VERDICTS = ("passed", "failed", "pending")


class AuditedBoundary(BaseModel):
    boundary: int = Field(description="the boundary's index in the node's trace")
    full: bool = Field(description="true: its full state was asked for; false: its sketch")
    state: str = Field(description="pending, delivered or missed (past its deadline)")
    step: int | None = Field(description="the inner steps done at the boundary, as committed")
    state_hash: str | None = Field(description="the committed state hash (a full state's blob)")
    sketch_hash: str | None = Field(description="the committed sketch hash (the sketch's blob)")


class SegmentAuditOut(BaseModel):
    run_id: str
    round: int
    node: str
    trace_root: str | None
    audit_seed: str | None = Field(description="the round's seed; null until the round is judged")
    segments: list[int] = Field(description="the segments the ledger drew (empty: not known)")
    boundary_steps: list[int] = Field(description="the inner step of each boundary of the trace")
    public_start: bool = Field(description="segment 0 starts at the public base, a fresh AdamW")
    origin_state_hash: str | None = Field(
        description="boundary 0's delivered full state: a round not started from its base "
        "(the overlap schedule) is audited from it"
    )
    boundaries: list[AuditedBoundary]
    excused: dict[str, str] = Field(
        description="segments (by start boundary) whose replay failed the screen but whose "
        "one-step verdict holds (ledger.judge.bisect), with the verdict's reason"
    )
    ledger_verdict: str = Field(description="passed, failed or pending")
    ledger_error: float | None = Field(description="a failed segment's error (fraud record)")
    reason: str | None = Field(description="the ledger's reason for the node-round's verdict")


def _verdict(att: Attestation | None) -> str:
    if att is None or att.verified is None:
        return "pending"
    return "passed" if att.verified else "failed"


@router.get(
    "/runs/{run_id}/rounds/{round}/segment-audits",
    response_model=list[SegmentAuditOut],
    responses=errors(404, 422, 503),
)
def get_segment_audits(
    run_id: RunIdPath,
    round: Annotated[int, Path(ge=0, lt=1 << 63)],
    *,
    session: SessionDep,
    settings: SettingsDep,
    snapshot: SnapshotDep,
    node: Annotated[str | None, Query(pattern=r"^0x[0-9a-fA-F]{40}$")] = None,
    limit: Annotated[int, Query(ge=1, le=AUDITS_LIMIT_MAX)] = AUDITS_LIMIT,
) -> list[SegmentAuditOut]:
    """The round's segment audits (module docstring), by node, at most ``limit`` node-rounds."""
    run = run_id.lower()
    rnd = session.exec(
        select(RoundState).where(RoundState.run_id == run, RoundState.round == round)
    ).first()
    if rnd is None:
        raise LedgerError(f"round {round} of run {run} is unknown to this ledger", code="not_found")
    query = select(BoundaryRequest).where(
        BoundaryRequest.run_id == run,
        BoundaryRequest.round == round,
        col(BoundaryRequest.at_step).in_([STATE_REQUEST, SKETCH_REQUEST]),
    )
    if node is not None:
        query = query.where(BoundaryRequest.node == to_checksum_address(node))
    by_node: dict[str, list[BoundaryRequest]] = {}
    for r in session.exec(query.order_by(col(BoundaryRequest.node), col(BoundaryRequest.id))):
        if r.node not in by_node and len(by_node) >= limit:
            break
        by_node.setdefault(r.node, []).append(r)
    seed = stored_seed(session, run, round) if rnd.state in JUDGED else None
    interval = snapshot.config.trace_interval if snapshot.config is not None else None
    out = []
    for who, rows in by_node.items():
        att = session.exec(
            select(Attestation).where(
                Attestation.run_id == run, Attestation.round == round, Attestation.node == who
            )
        ).first()
        drawn, marks, public = [], [], True
        if seed is not None and interval and att is not None:
            plan = segments.plan(seed, who, att.inner_steps, interval, settings.audit_segments)
            drawn, marks, public = list(plan.segments), list(plan.marks), plan.public_start
        origin = next(
            (r.state_hash for r in rows if r.boundary == 0 and r.at_step == STATE_REQUEST
             and r.state == "delivered"), None,
        )  # fmt: skip
        fraud = session.exec(
            select(FraudRecord).where(
                FraudRecord.run_id == run, FraudRecord.round == round, FraudRecord.node == who
            )
        ).first()
        error = json.loads(fraud.evidence).get("segment_error") if fraud is not None else None
        out.append(
            SegmentAuditOut(
                run_id=run,
                round=round,
                node=who,
                trace_root=att.trace_root if att is not None else None,
                audit_seed=None if seed is None else "0x" + seed.hex(),
                segments=drawn,
                boundary_steps=marks,
                public_start=public,
                origin_state_hash=origin,
                boundaries=[
                    AuditedBoundary(
                        boundary=r.boundary,
                        full=r.at_step == STATE_REQUEST,
                        state=r.state,
                        step=r.step,
                        state_hash=r.state_hash,
                        sketch_hash=r.sketch_hash,
                    )
                    for r in rows
                ],
                excused={
                    str(b): why
                    for b, why in bisect.held(bisect.find(session, run, round, who)).items()
                },
                ledger_verdict=_verdict(att),
                ledger_error=error if isinstance(error, (int, float)) else None,
                reason=att.reason if att is not None else None,
            )
        )
    return out
