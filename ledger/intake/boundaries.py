"""Boundaries served on demand: the ledger asks a node for one state of its committed trace, the
node uploads it, the ledger checks it against the ``traceRoot`` the node signed.

1. :func:`request_boundary` records the request (an audit's, or the operator's through
   ``POST /v1/boundaries/requests``) with a deadline, against the node's attestation of the round.
2. The node sees it (``GET /v1/boundaries/requests?node=``), uploads the state as a blob with
   the existing signed, quota-checked ``PUT /v1/blobs/{stateHash}`` (a state's blob id is its
   hash: protocol.hashing), then posts :class:`Delivery` (``POST /v1/boundaries/deliveries``).
3. :func:`deliver` refuses, naming why, anything but the stored blob of a state whose hash, with
   the claimed step and sketch hash, makes the leaf the proof leads to the signed root
   (reference.trace.check_served); a good delivery closes the request.
   A request for a boundary's **sketch** (``at_step`` :data:`SKETCH_REQUEST`: what an audit
   compares a segment's end with, a few KiB instead of the state) is answered the same way with
   the sketch as the blob (``PUT /v1/blobs/{sketchHash}``): it must be a sketch
   (reference.sketch.check_sketch) and, with the claimed state hash and step, make the leaf.
4. :func:`expire` marks the requests past their deadline ``missed`` with the reason the judge's
   rule gives (ledger.judge.boundaries): the node fails the audit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from ledger.core.blobstore import BlobStore
from ledger.core.models import (
    SKETCH_REQUEST,
    STATE_REQUEST,
    Attestation,
    BoundaryRequest,
    SegmentBisection,
    utcnow,
)
from ledger.judge.boundaries import withheld_reason
from protocol.eip712 import parse_bytes32
from protocol.errors import EncodingError, LedgerError
from protocol.hashing import hash_state_dict
from protocol.types import Bytes32
from reference.sketch import SketchError, check_sketch
from reference.trace import Boundary, TraceError, check_served, check_state, verify_leaf

log = logging.getLogger(__name__)

ZERO = "0x" + "00" * 32


@dataclass(frozen=True)
class Delivery:
    """What a node posts for one requested boundary (0x-hex hashes)."""

    run_id: str
    round: int
    node: str
    boundary: int
    step: int
    state_hash: str
    sketch_hash: str
    proof: tuple[str, ...]
    at_step: int = STATE_REQUEST
    """-1: the committed boundary; -2 (:data:`SKETCH_REQUEST`): its sketch, the blob named
    ``sketch_hash``; else the state after ``at_step`` steps (a bisection's probe: no sketch or
    proof, the state must hash to ``state_hash``)."""


def request_boundary(
    session: Session,
    run_id: str,
    round_: int,
    node: str,
    boundary: int,
    *,
    deadline_s: float,
    now: datetime | None = None,
    at_step: int = STATE_REQUEST,
) -> BoundaryRequest:
    """Ask ``node`` for ``boundary`` of its round ``round_`` by ``now + deadline_s`` (the same
    request twice is the first one); ``at_step`` :data:`SKETCH_REQUEST` asks for its sketch
    only, >= 0 for its state after that many inner steps, recomputed from ``boundary`` (a
    bisection's probe, ledger.judge.bisect)."""
    att = session.exec(
        select(Attestation).where(
            Attestation.run_id == run_id.lower(), Attestation.round == round_,
            Attestation.node == node,
        )
    ).first()  # fmt: skip
    if att is None:
        raise LedgerError(
            f"node {node} has no attestation of round {round_} of run {run_id}: there is no "
            "trace to ask a boundary of",
            code="not_found",
        )
    if att.trace_root == ZERO:
        raise LedgerError(
            f"node {node}'s attestation of round {round_} commits no trace (zero traceRoot)",
            code="no_trace",
        )
    if boundary < 0:
        raise LedgerError(f"boundary must be >= 0, got {boundary}", code="bad_boundary")
    if deadline_s <= 0:
        raise LedgerError(f"deadline_s must be positive, got {deadline_s}", code="bad_boundary")
    if at_step < SKETCH_REQUEST:
        raise LedgerError(f"at_step must be >= 0 (or -1: the boundary, -2: its sketch), got "
                          f"{at_step}", code="bad_boundary")  # fmt: skip
    existing = _find(session, att.run_id, round_, node, boundary, at_step)
    if existing is not None:
        return existing
    row = BoundaryRequest(
        run_id=att.run_id, round=round_, node=node, boundary=boundary, at_step=at_step,
        trace_root=att.trace_root, deadline=(now or utcnow()) + timedelta(seconds=deadline_s),
    )  # fmt: skip
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # asked at the same moment by another worker
        session.rollback()
        found = _find(session, att.run_id, round_, node, boundary, at_step)
        assert found is not None
        return found
    session.refresh(row)
    log.info("asked %s for boundary %d of round %d (run %s), due %s", node, boundary, round_,
             att.run_id, row.deadline.isoformat())  # fmt: skip
    return row


def _find(  # noqa: PLR0917 - the request's key, in order
    session: Session,
    run_id: str,
    round_: int,
    node: str,
    boundary: int,
    at_step: int = STATE_REQUEST,
) -> BoundaryRequest | None:
    return session.exec(
        select(BoundaryRequest).where(
            BoundaryRequest.run_id == run_id, BoundaryRequest.round == round_,
            BoundaryRequest.node == node, BoundaryRequest.boundary == boundary,
            BoundaryRequest.at_step == at_step,
        )
    ).first()  # fmt: skip


def open_requests(session: Session, node: str) -> list[BoundaryRequest]:
    """``node``'s requests still pending, oldest first."""
    return list(session.exec(
        select(BoundaryRequest)
        .where(BoundaryRequest.node == node, BoundaryRequest.state == "pending")
        .order_by(col(BoundaryRequest.id))
    ).all())  # fmt: skip


def _bytes32(name: str, value: str) -> bytes:
    try:
        return bytes(parse_bytes32(name, value))
    except EncodingError as exc:
        raise LedgerError(str(exc), code="encoding_error") from None


def deliver(
    session: Session, blobs: BlobStore, d: Delivery, *, now: datetime | None = None
) -> BoundaryRequest:
    """Check a delivery against the request's signed root and close the request."""
    request = _find(session, d.run_id.lower(), d.round, d.node, d.boundary, d.at_step)
    if request is None:
        raise LedgerError(
            f"no request for boundary {d.boundary} of round {d.round} from {d.node}: the ledger "
            "only takes the boundaries it asked for (GET /v1/boundaries/requests?node=)",
            code="not_found",
        )
    if request.state == "delivered":
        return request
    moment = now or utcnow()
    if request.state == "missed" or moment >= request.deadline:
        raise LedgerError(
            f"boundary {d.boundary} of round {d.round} was due at "
            f"{request.deadline.isoformat()}: delivered too late, the audit failed",
            code="boundary_late",
        )
    root = _bytes32("traceRoot", request.trace_root)
    sketch = _bytes32("sketchHash", d.sketch_hash)
    proof = [_bytes32(f"proof[{i}]", p) for i, p in enumerate(d.proof)]
    state_hash = "0x" + _bytes32("stateHash", d.state_hash).hex()
    if d.at_step == SKETCH_REQUEST:
        _deliver_sketch(blobs, request, d, root, Bytes32(sketch), proof)
        return _delivered(session, request, moment, d)
    tensors = blobs.tensors(state_hash)
    if tensors is None:
        raise LedgerError(
            f"no blob {state_hash}: upload the boundary state first with a signed "
            f"PUT /v1/blobs/{state_hash}",
            code="not_found",
        )
    if d.at_step >= 0:  # a probe: no leaf commits it, the blob (its hash) is the state named
        try:
            check_state(tensors)
        except TraceError as exc:
            raise LedgerError(f"state refused: {exc}", code="boundary_mismatch") from None
        request.step, request.state_hash = d.at_step, state_hash
    else:
        try:
            served = check_served(root, d.boundary, d.step, tensors, sketch, proof)
        except TraceError as exc:
            raise LedgerError(f"boundary refused: {exc}", code="boundary_mismatch") from None
        request.step = served.step
        request.state_hash = "0x" + served.state_hash.hex()
        request.sketch_hash = "0x" + served.sketch_hash.hex()
    return _delivered(session, request, moment, d)


def _delivered(
    session: Session, request: BoundaryRequest, moment: datetime, d: Delivery
) -> BoundaryRequest:
    request.state = "delivered"
    request.delivered_at = moment
    session.add(request)
    session.commit()
    session.refresh(request)
    what = "the sketch of boundary" if d.at_step == SKETCH_REQUEST else "boundary"
    log.info("%s %d of round %d delivered by %s", what, d.boundary, d.round, d.node)
    return request


def _deliver_sketch(  # noqa: PLR0917 - the delivery and what it is checked against
    blobs: BlobStore,
    request: BoundaryRequest,
    d: Delivery,
    root: bytes,
    sketch_hash: Bytes32,
    proof: list[bytes],
) -> None:
    """A delivered sketch: the blob ``sketch_hash`` must be a sketch that hashes to it and, with
    the claimed state hash and step, make the leaf the proof leads to the signed root."""
    name = "0x" + sketch_hash.hex()
    tensors = blobs.tensors(name)
    if tensors is None:
        raise LedgerError(
            f"no blob {name}: upload the boundary's sketch first with a signed "
            f"PUT /v1/blobs/{name}",
            code="not_found",
        )
    try:
        check_sketch(tensors)
    except SketchError as exc:
        raise LedgerError(f"sketch refused: {exc}", code="boundary_mismatch") from None
    if hash_state_dict(tensors) != sketch_hash:
        raise LedgerError(f"sketch refused: blob {name} does not hash to its name",
                          code="boundary_mismatch")  # fmt: skip
    state = Bytes32(_bytes32("stateHash", d.state_hash))
    if not verify_leaf(root, Boundary(d.boundary, d.step, state, sketch_hash), proof):
        raise LedgerError(
            f"sketch refused: boundary {d.boundary} (after {d.step} inner steps) with state "
            f"0x{state.hex()} and sketch {name} is not the leaf the proof leads to the committed "
            f"traceRoot {request.trace_root}",
            code="boundary_mismatch",
        )
    request.step = d.step
    request.state_hash = "0x" + state.hex()
    request.sketch_hash = name


def expire(session: Session, *, now: datetime | None = None) -> list[BoundaryRequest]:
    """Mark the pending requests past their deadline ``missed`` (the judge's reason); returns
    them."""
    moment = now or utcnow()
    due = session.exec(
        select(BoundaryRequest).where(
            BoundaryRequest.state == "pending", col(BoundaryRequest.deadline) <= moment
        )
    ).all()
    for request in due:
        request.state = "missed"
        request.reason = withheld_reason(request, moment)
        session.add(request)
        log.warning("node %s withheld boundary %d of round %d: %s", request.node,
                    request.boundary, request.round, request.reason)  # fmt: skip
    session.commit()
    return list(due)


def ask_probe(
    session: Session,
) -> Callable[[SegmentBisection, int, float, datetime], BoundaryRequest]:
    """The bisection's asker (ledger.judge.bisect.Ask) over ``session``: expire what is due, then
    the request for the node's state after ``at_step`` steps of the bisected segment."""

    def ask(
        row: SegmentBisection, at_step: int, deadline_s: float, now: datetime
    ) -> BoundaryRequest:
        expire(session, now=now)
        return request_boundary(session, row.run_id, row.round, row.node, row.boundary,
                                deadline_s=deadline_s, now=now, at_step=at_step)  # fmt: skip

    return ask
