"""Level 3 for a node-round with a committed trace: the segment audit (docs/ledger.md, "Segment
audit").

An audited node-round (drawn by :func:`ledger.judge.audits.sampled`, or suspicious) is checked on
``AUDIT_SEGMENTS`` of its segments (:func:`drawn_segments`, from the round's
seed, fixed after the round closed) instead of a whole-round replay:

1. :func:`plan` names the boundaries needed: each drawn segment's start and end, and the round's
   last boundary, whose weights must give the submitted pseudo-gradient (``base - last``, encoded
   as the node's packet): that binds the trace to the work that was paid for. Boundary 0 is asked
   for too when segment 0 is drawn: its weights must be the public base, and its AdamW moments
   are the node's carried state (none committed: a fresh AdamW), so one rule audits both inner
   modes (reference.inner.CARRY_STATE) without the ledger knowing which a node ran.
2. Those not asked for yet are raised in :class:`AuditPending` once every audited entry was
   seen; ``ledger.rounds.lifecycle.RoundKeeper`` files them (``ledger.intake.boundaries``, due in
   ``BOUNDARY_DEADLINE_S``); the node uploads each state, checked against the leaf of the
   ``traceRoot`` it signed when delivered.
3. While a request is pending and not due the round stays ``closing`` (the keeper skips it until
   none is); a request past its deadline fails its node
   (``ledger.judge.boundaries.check_boundaries``), never passes it by silence.
4. :func:`check_entry` replays each drawn segment from the node's own start state on the ledger's
   cores (``ledger.judge.replay.audit_span`` against ``SEGMENT_TOLERANCE``) and compares with its
   end state; a mismatch is a fraud record with the evidence to re-run it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import torch
from sqlmodel import Session, col, select

from ledger.core.blobstore import BlobStore
from ledger.core.models import BoundaryRequest, RoundState
from ledger.judge.tensors import Tensors
from protocol.eip712 import keccak256
from reference.segment import State, fresh_state
from reference.trace import boundary_steps

log = logging.getLogger(__name__)

LAST_BOUNDARY_TOLERANCE = 1e-6
"""Relative L2 distance allowed between the submitted pseudo-gradient and ``base - last
boundary's weights``: the node computes the same float32 subtraction (0 measured); more is a
pseudo-gradient that is not the trace's work."""


class AuditPending(Exception):
    """The round's audits wait for boundary states: ``wanted`` (node -> boundaries) are still to be
    requested (``ledger.rounds.lifecycle`` files them: requests are intake's), the others are
    asked for and not due yet."""

    def __init__(self, run_id: str, round_: int, wanted: dict[str, list[int]],
                 waiting: list[str]) -> None:  # fmt: skip
        nodes = sorted(set(wanted) | set(waiting))
        super().__init__(
            f"round {round_} of run {run_id} waits for boundary states from {', '.join(nodes)}"
        )
        self.run_id, self.round = run_id, round_
        self.wanted = wanted
        self.waiting = waiting


@dataclass(frozen=True)
class SegmentPlan:
    """The drawn segments of one node-round and the boundaries they need."""

    segments: tuple[int, ...]
    marks: tuple[int, ...]  # the inner step of each boundary (reference.trace.boundary_steps)

    @property
    def last(self) -> int:
        return len(self.marks) - 1

    @property
    def needed(self) -> list[int]:
        wanted = {self.last}
        for j in self.segments:
            wanted |= {j, j + 1}
        return sorted(wanted)

    def span(self, segment: int) -> tuple[int, int]:
        """(first step, steps) of ``segment``."""
        return self.marks[segment], self.marks[segment + 1] - self.marks[segment]


def drawn_segments(seed: bytes, node: str, segments: int, count: int) -> list[int]:
    """The segments of an audited node-round that the segment audit replays: ``count`` distinct
    indices of ``segments`` (all of them when ``count`` >= ``segments``), drawn from keccak of
    the round's seed (fixed after the round closed, :func:`ledger.judge.audits.round_seed`) and
    the node's address, so a node cannot know which of its segments will be checked when it
    trains or signs (docs/ledger.md, "Segment audit": the chance a cheat hidden in one segment
    is caught)."""
    if segments <= 0 or count <= 0:
        raise ValueError(f"segments ({segments}) and count ({count}) must be positive")
    address = bytes.fromhex(node.removeprefix("0x").lower())
    pool = list(range(segments))
    picked: list[int] = []
    for i in range(min(count, segments)):
        draw = keccak256(seed + address + b"coloco-segment" + i.to_bytes(4, "big"))
        picked.append(pool.pop(int.from_bytes(draw, "big") % len(pool)))
    return sorted(picked)


def plan(seed: bytes, node: str, inner_steps: int, interval: int, count: int) -> SegmentPlan:

    marks = tuple(boundary_steps(inner_steps, interval))
    segments = drawn_segments(seed, node, len(marks) - 1, count)
    return SegmentPlan(tuple(segments), marks)


def existing(
    session: Session, run_id: str, round_: int, node: str, boundaries: list[int]
) -> dict[int, BoundaryRequest]:
    """The requests already filed for ``boundaries`` of ``node``'s round (by an earlier pass of
    this audit, or by an operator)."""
    rows = session.exec(
        select(BoundaryRequest).where(
            BoundaryRequest.run_id == run_id,
            BoundaryRequest.round == round_,
            BoundaryRequest.node == node,
            col(BoundaryRequest.boundary).in_(boundaries),
            BoundaryRequest.at_step == -1,  # a bisection's probes are not the boundaries
        )
    ).all()
    return {int(r.boundary): r for r in rows}


def round_requests(session: Session, rnd: RoundState) -> list[BoundaryRequest]:
    return list(
        session.exec(
            select(BoundaryRequest).where(
                BoundaryRequest.run_id == rnd.run_id, BoundaryRequest.round == rnd.round
            )
        ).all()
    )


def pending(requests: dict[int, BoundaryRequest], now: datetime) -> bool:
    return any(r.state == "pending" and now < r.deadline for r in requests.values())


def delivered(requests: dict[int, BoundaryRequest]) -> bool:
    return all(r.state == "delivered" and r.state_hash for r in requests.values())


def replay_state(state: Tensors) -> State:
    """A delivered boundary state as :mod:`reference.segment` replays it: weights and AdamW state
    (other committed tensors, such as a residual, play no part in the inner steps); a state
    before AdamW's first step (no moments committed) is a fresh one."""
    kept = {k: t.float() for k, t in state.items() if k.startswith(("weights/", "adam/"))}
    if not any(k.startswith("adam/") for k in kept):
        return fresh_state({k.removeprefix("weights/"): t for k, t in kept.items()})
    return kept


def last_pseudo_gradient(base: Tensors, last: Tensors) -> dict[str, torch.Tensor]:
    """``base - weights`` of the round's last boundary: the pseudo-gradient the trace commits."""
    return {
        n: (base[n].float() - last[f"weights/{n}"].float()).contiguous()
        for n in base
        if f"weights/{n}" in last
    }


def load_states(blobs: BlobStore, requests: dict[int, BoundaryRequest]) -> dict[int, Tensors]:
    out: dict[int, Tensors] = {}
    for b, r in requests.items():
        assert r.state_hash is not None
        tensors = blobs.tensors(r.state_hash)
        if tensors is None:
            raise LookupError(f"boundary {b}'s blob {r.state_hash} is not in the blob store")
        out[b] = tensors
    return out


@dataclass(frozen=True)
class SegmentOutcome:
    passed: bool
    cpu_seconds: float
    reason: str
    evidence: dict[str, object]  # what a fraud record adds to the attestation and the seed


def check_entry(  # noqa: PLR0917 - the audit's inputs, each public or committed
    submitted: Tensors,
    packet: object,
    base: Tensors,
    inputs: object,
    corpus: object,
    plan_: SegmentPlan,
    requests: dict[int, BoundaryRequest],
    states: dict[int, Tensors],
    *,
    tolerance: float,
    threads: int | None = None,
) -> SegmentOutcome:
    """The delivered boundaries of one node-round checked: the last one gives the submitted
    pseudo-gradient, then each drawn segment replays from its start to its end within
    ``tolerance`` (``ledger.judge.replay.audit_span``)."""
    from ledger.judge.replay import ReplayInputs, audit_span, encoded_as, relative_error
    from reference.codec import Packet
    from reference.data import Corpus

    assert isinstance(inputs, ReplayInputs) and isinstance(corpus, Corpus)
    assert packet is None or isinstance(packet, Packet)
    hashes = {str(b): r.state_hash for b, r in sorted(requests.items())}
    common: dict[str, object] = {
        "segments": list(plan_.segments),
        "boundary_steps": list(plan_.marks),
        "boundary_state_hashes": hashes,
        "segment_tolerance": tolerance,
    }
    claimed = encoded_as(packet, last_pseudo_gradient(base, states[plan_.last]))
    rel = relative_error(submitted, claimed)
    if not rel <= LAST_BOUNDARY_TOLERANCE:
        why = (
            f"the submitted pseudo-gradient is not base minus the weights of the trace's last "
            f"boundary {plan_.last} (relative L2 error {rel:.3g} > {LAST_BOUNDARY_TOLERANCE:g}): "
            "it is not the work the signed trace commits"
        )
        return SegmentOutcome(False, 0.0, why, common | {"last_boundary_error": rel})
    if 0 in plan_.segments:
        start = {n[len("weights/") :]: t for n, t in states[0].items() if n.startswith("weights/")}
        moved = relative_error(start, {n: t.float() for n, t in base.items()})
        if not moved <= LAST_BOUNDARY_TOLERANCE:
            why = (
                f"boundary 0 is not the round's committed base (relative L2 distance {moved:.3g}):"
                " the node's round did not start from the checkpoint it signed"
            )
            return SegmentOutcome(False, 0.0, why, common | {"start_error": moved})
    cpu = 0.0
    passed: list[str] = []
    for j in plan_.segments:
        first, steps = plan_.span(j)
        verdict = audit_span(replay_state(states[j]), replay_state(states[j + 1]),
                             inputs, corpus, first=first, steps=steps, tolerance=tolerance,
                             threads=threads)  # fmt: skip
        cpu += verdict.cpu_seconds
        if not verdict.passed:
            evidence = common | {
                "segment": j, "first_step": first, "steps": steps, "segment_error": verdict.error,
                "start_boundary": j, "end_boundary": j + 1,
            }  # fmt: skip
            return SegmentOutcome(False, cpu, f"segment {j}: {verdict.reason}", evidence)
        passed.append(f"segment {j}: {verdict.reason}")
    return SegmentOutcome(True, cpu, "; ".join(passed), common)
