"""The sparse round's exact check: the signed packet recomputed from the node's committed state.

In the sparse wire format a node sends the top-k of ``(origin - local) + residual * beta`` and
carries the rest to its next round (reference.codec.sparse.encode_feedback). Every input is in
the round's committed trace (reference.trace): boundary 0 holds the round's origin weights and
the residual the round starts from (``residual/<param>``), the last boundary the end-of-round
weights. Compression is deterministic, so the ledger holds a sparse round to two exact rules:

1. the packet recomputed from those committed states equals the signed packet bit for bit
   (offsets, codes and fp32 steps);
2. the residual the node's next round commits in its boundary 0 is what this round's compression
   left, or zero (a node that adopts a checkpoint it did not land itself starts afresh:
   trainer.round.residual); any other residual is mass the node never sent, injected.

The audit's tolerance applies only to the training steps (the replay or segment audit holds the
committed weights to the replayed inner steps); the packet's derivation from them has none, so a
mismatch is fraud by construction. :func:`check_sparse_round` is the rule on the states;
:func:`sparse_round` reads them from the boundaries the node delivered (``BoundaryRequest``
rows, asked for with :func:`needed`) and marks the entry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from sqlmodel import Session, select

from ledger.core.models import STATE_REQUEST, BoundaryRequest, RoundState
from ledger.judge.entries import Context, Entry, Fraud
from ledger.judge.origin_check import (
    OriginVerdict,
    PreviousRound,
    audit_bases,
    check_origin,
    packet_origin,
    weights_of,
)
from protocol.blobs import decode_blob
from protocol.eip712 import keccak256
from protocol.errors import ColocoError
from reference.codec import Packet
from reference.codec.sparse import encode_feedback
from reference.outer import FlatLayout
from reference.settings import WireFormat
from reference.trace import WEIGHTS, TraceError, boundary_steps, residual_of

log = logging.getLogger(__name__)

CHECK = "sparse_packet"
Tensors = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class SparseVerdict:
    passed: bool
    reason: str


def _weights(state: Tensors) -> dict[str, torch.Tensor]:
    return {n.removeprefix(WEIGHTS): t for n, t in state.items() if n.startswith(WEIGHTS)}


def check_sparse_round(
    packet: Packet,
    start: Tensors,
    end: Tensors,
    next_start: Tensors | None = None,
    *,
    origin: Tensors | None = None,
) -> SparseVerdict:
    """Rules 1 and 2 of the module docstring on a round's committed boundary 0 (``start``), its
    last boundary (``end``) and, when known, the next round's boundary 0 (``next_start``).
    ``origin``: the weights the packet is measured from when not boundary 0's (the bounded
    overlap measures it from the attested base its first boundary moved to)."""
    if packet.fmt is not WireFormat.SPARSE:
        return SparseVerdict(False, f"the signed packet is {packet.fmt.label}, not sparse")
    weights = _weights(end)
    layout = FlatLayout({n: t.shape for n, t in weights.items()})
    try:
        residual = residual_of(start, layout)
        frm = layout.flatten(_weights(start) if origin is None else weights_of(origin))
        local = layout.flatten(weights)
    except (TraceError, ColocoError) as exc:
        return SparseVerdict(False, f"the committed boundaries do not fit each other: {exc}")
    if residual is None:
        return SparseVerdict(False, "boundary 0 commits no error-feedback residual (residual/"
                             "<param>): the sparse packet cannot be recomputed")  # fmt: skip
    # a zero residual is the node's "none" (its compress starts from the update itself)
    recomputed, left = encode_feedback(frm, local, residual if bool(residual.any()) else None)
    if packet.payload.numel() != recomputed.payload.numel() or packet.numel != recomputed.numel:
        return SparseVerdict(False, f"the signed packet holds {packet.numel} values in "
                             f"{packet.payload.numel()} payload bytes, the committed model "
                             f"{recomputed.numel} in {recomputed.payload.numel()}")  # fmt: skip
    assert packet.scales is not None and recomputed.scales is not None
    payload_ok = torch.equal(packet.payload.cpu(), recomputed.payload)
    steps_ok = torch.equal(packet.scales.cpu().view(torch.int32),
                           recomputed.scales.view(torch.int32))  # fmt: skip
    if not (payload_ok and steps_ok):
        differ = int((packet.payload.cpu() != recomputed.payload).sum())
        return SparseVerdict(False, (
            "the sparse packet recomputed from the committed end-of-round weights and residual "
            f"differs from the signed packet ({differ} payload bytes differ, steps "
            f"{'equal' if steps_ok else 'differ'}): the packet is not the committed state's"
        ))  # fmt: skip
    if next_start is None:
        return SparseVerdict(True, "sparse packet recomputed bit for bit from the committed "
                             "trace (the next round's residual not checked yet)")  # fmt: skip
    try:
        carried = residual_of(next_start, layout)
    except TraceError as exc:
        return SparseVerdict(False, f"the next round's boundary 0: {exc}")
    if carried is None:
        return SparseVerdict(False, "the next round's boundary 0 commits no residual")
    if not (torch.equal(carried, left) or not bool(carried.any())):
        wrong = int((carried != left).sum())
        return SparseVerdict(False, (
            f"the residual the next round starts from differs from what this round's packet "
            f"left in {wrong} of {left.numel()} values (neither that nor zero): mass the node "
            "never sent"
        ))  # fmt: skip
    return SparseVerdict(True, "sparse packet recomputed bit for bit from the committed trace, "
                         "and the next round starts from the residual it left")  # fmt: skip


def needed(round_: int, inner_steps: int, trace_interval: int) -> list[tuple[int, int]]:
    """The (round, boundary) states the check of a node's ``round_`` reads: its boundary 0 and
    last boundary, and the next round's boundary 0."""
    last = len(boundary_steps(inner_steps, trace_interval)) - 1
    return [(round_, 0), (round_, last), (round_ + 1, 0)]


def _delivered(session: Session, ctx: Context, e: Entry, at: tuple[int, int]) -> Tensors | None:
    """The state the node delivered for (round, boundary) ``at`` (None: not delivered)."""
    row = session.exec(select(BoundaryRequest).where(
        BoundaryRequest.run_id == e.att.run_id, BoundaryRequest.round == at[0],
        BoundaryRequest.node == e.att.node, BoundaryRequest.boundary == at[1],
        BoundaryRequest.state == "delivered", BoundaryRequest.at_step == STATE_REQUEST,
    )).first()  # fmt: skip
    if row is None or row.state_hash is None or not ctx.blobs.exists(row.state_hash):
        return None
    blob = ctx.blobs.path(row.state_hash).read_bytes()
    return decode_blob(blob, max_bytes=len(blob))


def delivered_start(session: Session, ctx: Context, e: Entry, round_: int) -> Tensors | None:
    """The node's delivered boundary 0 of ``round_`` (None: not delivered), read once for
    :func:`carries_residual` and :func:`sparse_round`."""
    return _delivered(session, ctx, e, (round_, 0))


def carries_residual(start: Tensors | None) -> bool:
    """Whether a delivered boundary 0 commits a residual that is not zero (then rule 2 reads
    the node's round r-1)."""
    if start is None:
        return False
    layout = FlatLayout({n: t.shape for n, t in _weights(start).items()})
    try:
        residual = residual_of(start, layout)
    except (TraceError, ColocoError):
        return False  # the check names it
    return residual is not None and bool(residual.any())


def carried_residual(start: Tensors, previous: PreviousRound | str) -> SparseVerdict:
    """Rule 2 read from round r: the residual boundary 0 commits must be zero (a reset), or what
    the node's round r-1 compression left, recomputed from round r-1's committed boundary 0
    (its residual) and last boundary, measured from what its packet was
    (``origin_check.packet_origin``: its base, or its boundary 0 on the one-round overlap)
    (``previous``; a reason: round r-1 cannot be had)."""
    weights = _weights(start)
    layout = FlatLayout({n: t.shape for n, t in weights.items()})
    try:
        residual = residual_of(start, layout)
    except (TraceError, ColocoError) as exc:
        return SparseVerdict(False, f"boundary 0's residual: {exc}")
    if residual is None or not bool(residual.any()):
        return SparseVerdict(True, "the round starts from a zero residual")
    if isinstance(previous, str):
        return SparseVerdict(False, f"boundary 0 carries a residual, but {previous}: mass "
                             "the node never sent cannot be told from what its last round "
                             "left")  # fmt: skip
    try:
        before = residual_of(previous.start, layout)  # zero is the node's "none", as in rule 1
        _, left = encode_feedback(
            layout.flatten(packet_origin(previous)),  # its base, or its origin (overlap)
            layout.flatten(_weights(previous.end)),
            before if before is not None and bool(before.any()) else None,
        )
    except (TraceError, ColocoError) as exc:
        return SparseVerdict(False, f"round r-1's committed boundaries: {exc}")
    if not torch.equal(residual, left):
        wrong = int((residual != left).sum())
        return SparseVerdict(False, (
            f"the residual boundary 0 commits differs from what the node's round r-1 left in "
            f"{wrong} of {residual.numel()} values (neither that nor zero): mass the node never "
            "sent"
        ))  # fmt: skip
    return SparseVerdict(True, "the round starts from the residual its last round left")


def sparse_round(  # noqa: PLR0917 - the entry, its round and round r-1
    session: Session,
    e: Entry,
    ctx: Context,
    rnd: RoundState,
    base: Tensors,
    previous: PreviousRound | str | None = None,
    start: Tensors | None = None,
) -> bool:
    """Hold ``e``'s sparse packet to the node's delivered boundaries; returns whether the check
    ran and passed. Boundary 0, the packet's origin, must first be a public point
    (ledger.judge.origin_check: the attested ``base``, or round r-1's base less the node's
    round r-1 committed progress, read from its delivered boundaries). A mismatch fails the
    entry (``sparse_packet``; a start that is neither point ``audit_failed``) with its fraud
    evidence; boundaries not delivered yet leave it not audited (said in its reason).
    ``start``: boundary 0 when the caller read it already (:func:`delivered_start`)."""
    assert e.packet is not None
    att = e.att
    want = needed(rnd.round, att.inner_steps, ctx.config.trace_interval)
    if start is None:
        start = _delivered(session, ctx, e, want[0])
    end, after = (_delivered(session, ctx, e, at) for at in want[1:])
    if start is None or end is None:
        e.reason += ("; not audited: a sparse round is checked from its delivered boundaries "
                     f"{want[:2]} (round, boundary)")  # fmt: skip
        return False
    origin = check_origin(start, base)
    if not origin.passed:  # the overlap schedule's start, or a lie: round r-1 tells
        from ledger.judge.segments import previous_round

        prev = previous_round(session, ctx, att.run_id, rnd.round, att.node)
        if prev is None:
            e.reason += ("; not audited: a sparse round that did not start from its base is "
                         f"checked with round {rnd.round - 1}'s delivered boundaries 0 and "
                         "last")  # fmt: skip
            return False
        origin = check_origin(start, base, prev) if not isinstance(prev, str) else \
            OriginVerdict(False, "", prev)  # fmt: skip
        if not origin.passed:
            _fraud(e, "audit_failed", origin.reason, want)
            log.warning("node %s round %d: %s", att.node, rnd.round, origin.reason)
            return False
    verdict = check_sparse_round(e.packet, start, end, after,
                                 origin=audit_bases(origin, start, base)[0])  # fmt: skip
    if verdict.passed and previous is not None:  # rule 2, from this round's side
        carried = carried_residual(start, previous)
        if not carried.passed:
            _fraud(e, CHECK, carried.reason, want)
            log.warning("node %s round %d: %s", att.node, rnd.round, carried.reason)
            return False
        verdict = SparseVerdict(True, f"{verdict.reason}; {carried.reason}")
    if verdict.passed:
        e.reason += f"; {verdict.reason}" + (f" (origin: {origin.reason})"
                                             if origin.schedule != "lockstep" else "")  # fmt: skip
        return True
    _fraud(e, CHECK, verdict.reason, want)
    log.warning("node %s round %d: %s", att.node, rnd.round, verdict.reason)
    return False


def _fraud(e: Entry, check: str, reason: str, want: list[tuple[int, int]]) -> None:
    """Fail ``e`` under ``check`` with the evidence of the sparse round's check."""
    att = e.att
    evidence = {
        "attestation": att.digest, "signature": att.signature, "reason": reason,
        "submitted": att.pseudo_gradient, "trace_root": att.trace_root,
        "boundaries": [list(w) for w in want],
    }  # fmt: skip
    text = json.dumps(evidence, sort_keys=True, default=str)
    e.fraud = Fraud(text, "0x" + keccak256(text.encode()).hex())
    e.fail(check, f"{reason}; fraud record {e.fraud.evidence_hash}")
