"""Boundaries served on demand (ledger.intake.boundaries): the ledger asks a node for one state
of its committed trace, the node uploads it and delivers it, the ledger checks it against the
signed ``traceRoot``.

- ``POST /v1/boundaries/requests`` (admin): ask ``node`` for ``boundary`` of round ``round``;
- ``GET /v1/boundaries/requests?node=0x..``: a node's pending requests (what its loop polls);
- ``POST /v1/boundaries/deliveries``: the state's hash, step, sketch hash and Merkle proof, after
  a signed ``PUT /v1/blobs/{stateHash}`` of the state; refused with ``boundary_mismatch`` unless
  it hashes to the committed leaf.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict
from starlette.concurrency import run_in_threadpool

from ledger.api.deps import JSON_BODY, AdminDep, BlobsDep, SessionDep
from ledger.api.errors import errors
from ledger.core.models import SKETCH_REQUEST, STATE_REQUEST, BoundaryRequest
from ledger.core.schemas import AddressStr, Hex32, RoundIn, Uint32
from ledger.intake import boundaries
from protocol.eip712 import to_checksum_address
from protocol.errors import LedgerError

router = APIRouter(prefix="/boundaries", tags=["boundaries"])

AT_STEP = (
    "absent or null: the committed boundary; else the node's state after at_step inner steps, "
    "recomputed from the boundary (a bisection's probe)"
)
SKETCH = (
    "true: the boundary's sketch only (reference.sketch; the blob named sketch_hash), what the "
    "segment audit compares a segment's end with; not with at_step"
)
ONE_KIND: JsonDict = {  # the schema says it: a sketch or a probe, never both
    "not": {
        "required": ["sketch", "at_step"],
        "properties": {"sketch": {"const": True}, "at_step": {"not": {"type": "null"}}},
    }
}
MAX_PROOF = 64  # a tree of 2^64 boundaries: far above any round's


class BoundaryRequestIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=ONE_KIND)

    run_id: Hex32
    round: RoundIn
    node: AddressStr
    boundary: Uint32
    deadline_s: float = Field(gt=0, le=7 * 86_400, description="seconds the node has to deliver")
    at_step: Uint32 | None = Field(default=None, description=AT_STEP)
    sketch: bool = Field(default=False, description=SKETCH)


class BoundaryRequestOut(BaseModel):
    id: int
    run_id: str
    round: int
    node: str
    boundary: int
    at_step: int
    sketch: bool = Field(description="a request for the boundary's sketch only (at_step -2)")
    trace_root: str
    deadline: datetime
    state: str
    step: int | None
    state_hash: str | None
    sketch_hash: str | None
    reason: str | None


class DeliveryIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=ONE_KIND)

    run_id: Hex32
    round: RoundIn
    node: AddressStr
    boundary: Uint32
    step: Uint32
    state_hash: Hex32
    sketch_hash: Hex32
    proof: list[Hex32] = Field(max_length=MAX_PROOF)
    at_step: Uint32 | None = Field(default=None, description=AT_STEP)
    sketch: bool = Field(default=False, description=SKETCH)


def _at(at_step: int | None, sketch: bool = False) -> int:
    if sketch and at_step is not None:
        raise LedgerError("ask for a sketch (sketch: true) or a probe (at_step), not both",
                          code="bad_boundary")  # fmt: skip
    if sketch:
        return SKETCH_REQUEST
    return STATE_REQUEST if at_step is None else at_step


def _out(row: BoundaryRequest) -> BoundaryRequestOut:
    fields = {k: getattr(row, k) for k in BoundaryRequestOut.model_fields if k != "sketch"}
    return BoundaryRequestOut(**fields, sketch=row.at_step == SKETCH_REQUEST)


@router.post(
    "/requests",
    response_model=BoundaryRequestOut,
    status_code=201,
    responses=errors(400, 401, 404, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
def post_request(
    session: SessionDep, body: BoundaryRequestIn, _admin: AdminDep
) -> BoundaryRequestOut:
    """Ask a node for one boundary state of its round's trace, due in ``deadline_s``."""
    row = boundaries.request_boundary(
        session, body.run_id, body.round, to_checksum_address(body.node), body.boundary,
        deadline_s=body.deadline_s, at_step=_at(body.at_step, body.sketch),
    )  # fmt: skip
    return _out(row)


@router.get("/requests", response_model=list[BoundaryRequestOut], responses=errors(422, 503))
def get_requests(
    session: SessionDep, node: Annotated[str, Query(pattern=r"^0x[0-9a-fA-F]{40}$")]
) -> list[BoundaryRequestOut]:
    """``node``'s pending requests, oldest first (past-deadline ones are marked missed first)."""
    boundaries.expire(session)
    return [_out(r) for r in boundaries.open_requests(session, to_checksum_address(node))]


@router.post(
    "/deliveries",
    response_model=BoundaryRequestOut,
    responses=errors(400, 404, 409, 413, 415, 422, 503),
    dependencies=JSON_BODY,
)
async def post_delivery(
    session: SessionDep, blobs: BlobsDep, body: DeliveryIn
) -> BoundaryRequestOut:
    """Deliver a requested boundary: its state must be an uploaded blob that hashes, with the
    step and sketch hash, to the leaf the proof leads to the node's signed traceRoot."""
    delivery = boundaries.Delivery(
        run_id=body.run_id, round=body.round, node=to_checksum_address(body.node),
        boundary=body.boundary, step=body.step, state_hash=body.state_hash,
        sketch_hash=body.sketch_hash, proof=tuple(body.proof),
        at_step=_at(body.at_step, body.sketch),
    )  # fmt: skip
    row = await run_in_threadpool(boundaries.deliver, session, blobs, delivery)
    return _out(row)
