"""Level 3 for a node-round with a committed trace: the segment audit (docs/ledger.md, "Segment
audit").

An audited node-round (drawn by :func:`ledger.judge.audits.sampled`, or suspicious) is checked on
``AUDIT_SEGMENTS`` of its segments (:func:`drawn_segments`, from the round's
seed, fixed after the round closed) instead of a whole-round replay:

1. :func:`plan` names the boundaries needed, and what of each: an audit moves **at most one
   full state per drawn segment** (12 B/param: weights and AdamW moments), its start, and only
   the **sketches** (reference.sketch, 3 x 1,024 float64 numbers) of the rest: each drawn
   segment's end, and the round's last boundary, whose sketch must be that of the submitted
   pseudo-gradient (``base - last``: the sketch's weights part is exactly that, so in fp32 it
   binds bit for bit, in bf16/int8 within the codec's rounding bound): that binds the trace to
   the work that was paid for. A segment 0 of a fresh inner optimizer (reference.inner.CARRY_STATE
   off) starts at the public base: no full state moves, boundary 0's sketch delivery names its
   committed state hash, which must be the base's. With a carried AdamW, boundary 0 carries the
   node's moments: its full state is the segment's start (its weights must be the base).
2. Those not asked for yet are raised in :class:`AuditPending` once every audited entry was
   seen; ``ledger.rounds.lifecycle.RoundKeeper`` files them (``ledger.intake.boundaries``, due in
   ``BOUNDARY_DEADLINE_S``); the node uploads each state, checked against the leaf of the
   ``traceRoot`` it signed when delivered.
3. While a request is pending and not due the round stays ``closing`` (the keeper skips it until
   none is); a request past its deadline fails its node
   (``ledger.judge.boundaries.check_boundaries``), never passes it by silence.
4. :func:`check_entry` checks each full state's committed sketch is its sketch (so a node cannot
   commit sketches of another trajectory than its states), then replays each drawn segment from
   the node's own start state on the ledger's cores (``ledger.judge.replay.audit_span`` against
   ``SEGMENT_TOLERANCE``) and compares with its end's committed sketch, read on sketches under
   the projection the end's state hash seeds; a mismatch is a fraud record with the evidence
   to re-run it.

A round that did not start from its attested base (the overlap schedule, trainer.round.overlap)
shows it on those deliveries (:func:`starts_elsewhere`); its audit then also moves boundary 0 in
full (``SegmentPlan.origin``) and round r-1's boundary 0 and last boundary
(:func:`previous_round`), checks that origin (ledger.judge.origin_check) and audits the round
from it (docs/ledger.md, "Auditing an overlapped round").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import torch
from sqlmodel import Session, col, select

from ledger.core.blobstore import BlobStore
from ledger.core.models import (
    SKETCH_REQUEST,
    STATE_REQUEST,
    Attestation,
    BoundaryRequest,
    RoundState,
    utcnow,
)
from ledger.judge.origin_check import PreviousRound
from ledger.judge.tensors import Tensors
from protocol.eip712 import keccak256
from protocol.hashing import hash_state_dict
from reference.codec import Packet
from reference.segment import State, fresh_state
from reference.settings import WireFormat
from reference.sketch import Projection, SketchError, check_sketch, distance, make_sketch
from reference.trace import boundary_steps, state_hash

if TYPE_CHECKING:
    from ledger.judge.entries import Context

log = logging.getLogger(__name__)

LAST_BOUNDARY_TOLERANCE = 1e-6
"""Relative L2 distance allowed between the submitted pseudo-gradient and ``base - last
boundary's weights``: the node computes the same float32 subtraction (0 measured); more is a
pseudo-gradient that is not the trace's work."""
SKETCH_SLACK = 3.0
"""A bf16 or int8 packet rounds each coordinate of ``base - last`` by at most half a code; the
last boundary's sketch may be that far from the sketch of the decoded packet, times this factor
(a count-sketch keeps a distance within a few percent; an honest packet's rounding is about
0.6 of the bound: :func:`rounding_bound`)."""
Need = tuple[int, int]
"""(boundary, what): ``STATE_REQUEST`` its full state, ``SKETCH_REQUEST`` its sketch."""


def earlier_needs(last: int) -> list[Need]:
    """What the origin check of an overlapped round r reads of the node's round r-1 (whose last
    boundary is ``last``): its boundary 0 and last boundary, in full (the node's round r-1
    progress, ``ledger.judge.origin_check.PreviousRound``)."""
    return [(0, STATE_REQUEST), (last, STATE_REQUEST)]


class AuditPending(Exception):
    """The round's audits wait for boundary states: ``wanted`` (node -> boundaries) are still to be
    requested (``ledger.rounds.lifecycle`` files them: requests are intake's), the others are
    asked for and not due yet."""

    def __init__(self, run_id: str, round_: int, wanted: dict[str, list[Need]],
                 waiting: list[str],
                 earlier: dict[str, list[Need]] | None = None) -> None:  # fmt: skip
        nodes = sorted(set(wanted) | set(waiting) | set(earlier or {}))
        super().__init__(
            f"round {round_} of run {run_id} waits for boundary states from {', '.join(nodes)}"
        )
        self.run_id, self.round = run_id, round_
        self.wanted = wanted
        self.waiting = waiting
        self.earlier = earlier or {}
        """Boundaries of the node's round ``round_ - 1`` (an overlapped round's origin check)."""


@dataclass(frozen=True)
class SegmentPlan:
    """The drawn segments of one node-round and the boundaries they need (module docstring):
    the full state of each segment's start (none for a segment 0 at the public base:
    ``public_start``, a fresh inner optimizer), the sketches of the others."""

    segments: tuple[int, ...]
    marks: tuple[int, ...]  # the inner step of each boundary (reference.trace.boundary_steps)
    public_start: bool = True  # boundary 0 is the public base and a fresh AdamW
    origin: bool = False
    """The round started elsewhere than its attested base (the overlap schedule, found on the
    first deliveries: :func:`starts_elsewhere`): boundary 0's full state is the round's origin,
    the base its sketches are taken from, checked by ``ledger.judge.origin_check`` against
    round r-1's committed boundaries (:data:`EARLIER`)."""

    exact: bool = False
    """The sparse wire format: boundary 0 and the last boundary also move in full, from which
    ``ledger.judge.sparse_check`` recomputes the signed packet bit for bit."""

    @property
    def last(self) -> int:
        return len(self.marks) - 1

    @property
    def full(self) -> list[int]:
        """The boundaries whose full state the audit moves: each drawn segment's start (and
        boundary 0, the origin, for a round that did not start from its base)."""
        starts = {j for j in self.segments if j > 0 or not self.public_start}
        exact = {0, self.last} if self.exact else set()
        return sorted(starts | exact | ({0} if self.origin else set()))

    @property
    def sketches(self) -> list[int]:
        """The boundaries only sketched: the segments' ends, the last boundary, and boundary 0
        of a segment at the public base (its delivery names the state hash it committed) or of
        any carried round (its sketch commits the AdamW state the round starts from:
        ledger.judge.continuity)."""
        wanted = {self.last} | {j + 1 for j in self.segments}
        if 0 in self.segments or not self.public_start:
            wanted.add(0)
        return sorted(wanted - set(self.full))

    @property
    def needed(self) -> list[Need]:
        return [(b, STATE_REQUEST) for b in self.full] + [
            (b, SKETCH_REQUEST) for b in self.sketches
        ]

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


def plan(  # noqa: PLR0917 - the draw's inputs
    seed: bytes, node: str, inner_steps: int, interval: int, count: int,
    carried: bool | None = None, *, exact: bool = False,
) -> SegmentPlan:  # fmt: skip
    """The audit of ``node``'s round: its drawn segments and what they need; ``carried``: the
    protocol's inner mode (None: ``reference.inner.CARRY_STATE``); ``exact``: a sparse packet
    (:attr:`SegmentPlan.exact`)."""
    from reference import inner

    marks = tuple(boundary_steps(inner_steps, interval))
    segments = drawn_segments(seed, node, len(marks) - 1, count)
    mode = inner.CARRY_STATE if carried is None else carried
    return SegmentPlan(tuple(segments), marks, public_start=not mode, exact=exact)


def starts_elsewhere(
    plan_: SegmentPlan,
    requests: dict[Need, BoundaryRequest],
    states: dict[Need, Tensors],
    base: Tensors,
) -> bool:
    """Whether the delivered boundaries say the round did not start from its attested ``base``
    (so its sketches are taken from another origin: the overlap schedule, or a lie the origin
    check catches): a public boundary 0 whose committed state hash is not the base's, a full
    boundary 0 whose weights are not the base's, or a full state whose committed sketch is not
    its sketch against the base. Exact (bits), so an honest lockstep round is never moved to
    the origin audit; a lying one that is moved fails there."""
    if plan_.origin:
        return True
    for (b, what), r in requests.items():
        if what == SKETCH_REQUEST and b == 0 and 0 in plan_.segments and plan_.public_start:
            public = {f"weights/{n}": t.detach().float().contiguous() for n, t in base.items()}
            if str(r.state_hash) != "0x" + state_hash(public).hex():
                return True
        if what != STATE_REQUEST:
            continue
        state = states[(b, what)]
        if b == 0:
            weights = {n[len("weights/") :]: t for n, t in state.items()
                       if n.startswith("weights/")}  # fmt: skip
            if set(weights) != set(base) or any(
                not torch.equal(weights[n].float(), base[n].float()) for n in base
            ):
                return True
            continue
        try:
            mine = make_sketch(state, base, _hash(str(r.state_hash)))
        except SketchError:
            return False  # check_entry names it
        if "0x" + hash_state_dict(mine).hex() != r.sketch_hash:
            return True
    return False


def existing(
    session: Session, run_id: str, round_: int, node: str, needs: list[Need]
) -> dict[Need, BoundaryRequest]:
    """The requests already filed for ``needs`` of ``node``'s round (by an earlier pass of this
    audit, or by an operator)."""
    rows = session.exec(
        select(BoundaryRequest).where(
            BoundaryRequest.run_id == run_id,
            BoundaryRequest.round == round_,
            BoundaryRequest.node == node,
            col(BoundaryRequest.boundary).in_({b for b, _ in needs}),
            # a full state or its sketch; a bisection's probes (at_step >= 0) are not boundaries
            col(BoundaryRequest.at_step).in_([STATE_REQUEST, SKETCH_REQUEST]),
        )
    ).all()
    found = {(int(r.boundary), int(r.at_step)): r for r in rows}
    return {n: found[n] for n in needs if n in found}


def previous_attestation(
    session: Session, run_id: str, round_: int, node: str
) -> Attestation | None:
    """The node's traced attestation of round ``round_ - 1`` (None: it attested no traced one)."""
    att = session.exec(
        select(Attestation).where(
            Attestation.run_id == run_id, Attestation.round == round_ - 1,
            Attestation.node == node,
        )
    ).first()  # fmt: skip
    return None if att is None or att.trace_root in (None, "", "0x" + "00" * 32) else att


def previous_round(  # noqa: PLR0917 - the node-round's key and where to ask
    session: Session,
    ctx: Context,
    run_id: str,
    round_: int,
    node: str,
    earlier: dict[str, list[Need]] | None = None,
) -> PreviousRound | str | None:
    """Round ``round_ - 1`` of ``node`` as the origin check reads it
    (``ledger.judge.origin_check``): its attested base (the ledger's checkpoint blob) and its
    delivered boundary 0 and last boundary in full. None while they are to be asked for (added
    to ``earlier`` when given) or pending; a reason when they cannot be had (no traced round r-1
    of that node, a base not in the blob store, a boundary withheld past its deadline)."""
    from ledger.judge.boundaries import withheld_reason

    att = previous_attestation(session, run_id, round_, node)
    if att is None:
        return (
            f"the node attested no traced round {round_ - 1} whose progress (and error "
            "feedback) it could have started from"
        )
    needs = previous_needs(att, ctx)
    requests = existing(session, run_id, round_ - 1, node, needs)
    missing = [n for n in needs if n not in requests]
    if missing:
        ask_earlier(earlier, node, missing)
        return None
    if pending(requests, utcnow()):
        return None
    for r in requests.values():
        reason = withheld_reason(r, utcnow())
        if reason is not None:
            return reason
    base = ctx.blobs.tensors(att.base_checkpoint)
    if base is None:
        return (f"round {round_ - 1}'s base checkpoint {att.base_checkpoint} is not in the "
                "blob store: the overlapped start cannot be recomputed")  # fmt: skip
    states = load_states(ctx.blobs, requests)
    return PreviousRound(base, states[needs[0]], states[needs[1]], requests[needs[1]].sketch_hash)


def previous_needs(att: Attestation, ctx: Context) -> list[Need]:
    """What :func:`previous_round` reads of the node's round r-1 (``att``): its boundary 0 and
    last boundary in full."""
    interval = ctx.config_of(att).trace_interval  # round r-1's, as the node signed it
    return earlier_needs(len(boundary_steps(att.inner_steps, interval)) - 1)


def ask_earlier(earlier: dict[str, list[Need]] | None, node: str, needs: list[Need]) -> None:
    """Add ``needs`` (boundaries of the node's round r-1) to what the round's audit asks
    ``node`` for (:class:`AuditPending`'s ``earlier``)."""
    if earlier is not None:
        wanted = earlier.setdefault(node, [])
        wanted.extend(n for n in needs if n not in wanted)


def round_requests(session: Session, rnd: RoundState) -> list[BoundaryRequest]:
    return list(
        session.exec(
            select(BoundaryRequest).where(
                BoundaryRequest.run_id == rnd.run_id, BoundaryRequest.round == rnd.round
            )
        ).all()
    )


def pending(requests: dict[Need, BoundaryRequest], now: datetime) -> bool:
    return any(r.state == "pending" and now < r.deadline for r in requests.values())


def delivered(requests: dict[Need, BoundaryRequest]) -> bool:
    return all(r.state == "delivered" and r.state_hash and r.sketch_hash
               for r in requests.values())  # fmt: skip


def replay_state(state: Tensors) -> State:
    """A delivered boundary state as :mod:`reference.segment` replays it: weights and AdamW state
    (other committed tensors, such as a residual, play no part in the inner steps); a state
    before AdamW's first step (no moments committed) is a fresh one."""
    kept = {k: t.float() for k, t in state.items() if k.startswith(("weights/", "adam/"))}
    if not any(k.startswith("adam/") for k in kept):
        return fresh_state({k.removeprefix("weights/"): t for k, t in kept.items()})
    return kept


def load_states(blobs: BlobStore, requests: dict[Need, BoundaryRequest]) -> dict[Need, Tensors]:
    """The delivered blobs: a full state by its state hash, a sketch by its sketch hash."""
    out: dict[Need, Tensors] = {}
    for (b, what), r in requests.items():
        name = r.sketch_hash if what == SKETCH_REQUEST else r.state_hash
        assert name is not None
        tensors = blobs.tensors(name)
        if tensors is None:
            raise LookupError(f"boundary {b}'s blob {name} is not in the blob store")
        out[(b, what)] = tensors
    return out


def moved_bytes(blobs: BlobStore, requests: dict[Need, BoundaryRequest]) -> int:
    """The bytes of the blobs the audit moved (the delivered states and sketches)."""
    total = 0
    for (_, what), r in requests.items():
        name = r.sketch_hash if what == SKETCH_REQUEST else r.state_hash
        path = blobs.path(name) if name else None
        total += path.stat().st_size if path is not None and path.is_file() else 0
    return total


def rounding_bound(packet: Packet | None, decoded: Tensors) -> float:
    """An upper bound of ``|base - last - decode(packet)|``: 0 in fp32 (the packet is that
    subtraction), half a bf16 ulp of each value, half an int8 code of each block (its scale;
    a block too small to code, ``TINY_AMAX``, is sent as zeros)."""
    if packet is None or packet.fmt is WireFormat.FP32:
        return 0.0
    flat = torch.cat([decoded[n].detach().reshape(-1).double() for n in sorted(decoded)])
    if packet.fmt is WireFormat.BF16:
        return float(flat.norm()) * 2.0**-8 * (1 + 2.0**-7)
    if packet.fmt is WireFormat.INT8 and packet.scales is not None:
        from reference.codec.formats import TINY_AMAX

        bs = packet.block_size
        scales = packet.scales.detach().double().cpu()
        half = torch.where(scales > 0, scales / 2, torch.full_like(scales, TINY_AMAX))
        counts = torch.full_like(scales, float(bs))
        counts[-1] = flat.numel() - bs * (scales.numel() - 1)
        return float((counts * half.square()).sum().sqrt()) * (1 + 1e-6)
    return math.inf  # another format (sparse) is audited by ledger.judge.sparse_check


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
    requests: dict[Need, BoundaryRequest],
    states: dict[Need, Tensors],
    *,
    tolerance: float,
    threads: int | None = None,
    excused: Mapping[int, str] | None = None,
    moved_to: Tensors | None = None,
) -> SegmentOutcome:
    """The delivered boundaries of one node-round checked (module docstring): each full state
    against its committed sketch, the last boundary's sketch against the submitted
    pseudo-gradient, a public segment 0's committed state against the base, then each drawn
    segment replayed from its start and compared with its end's sketch within ``tolerance``
    (``ledger.judge.replay.audit_span``). ``excused``: drawn segments whose replay may exceed
    the tolerance, each with the reason (a one-step verdict that holds, ledger.judge.bisect.held):
    the replay is a screen, the verdict decides. ``moved_to``: a bounded round's attested base,
    to which segment 0's replay moves at its end (ledger.judge.replay.audit_span)."""
    from ledger.judge.replay import EndSketch, ReplayInputs, audit_span, relative_error
    from reference.data import Corpus

    assert isinstance(inputs, ReplayInputs) and isinstance(corpus, Corpus)
    assert packet is None or isinstance(packet, Packet)
    hashes = {b: str(r.state_hash) for (b, _), r in sorted(requests.items())}
    common: dict[str, object] = {
        "segments": list(plan_.segments),
        "boundary_steps": list(plan_.marks),
        "boundary_state_hashes": {str(b): h for b, h in hashes.items()},
        "boundary_sketch_hashes": {str(b): r.sketch_hash for (b, _), r in sorted(requests.items())},
        "full_states": plan_.full,
        "segment_tolerance": tolerance,
    }

    def failed(why: str, **extra: object) -> SegmentOutcome:
        return SegmentOutcome(False, 0.0, why, common | extra)

    sketches: dict[int, Tensors] = {}
    for b in plan_.full:  # a full state's committed sketch is its sketch
        state, committed = states[(b, STATE_REQUEST)], requests[(b, STATE_REQUEST)].sketch_hash
        try:
            mine = make_sketch(state, base, _hash(hashes[b]))
        except SketchError as exc:
            return failed(f"boundary {b}'s state cannot be sketched against the base: {exc}")
        if "0x" + hash_state_dict(mine).hex() != committed:
            return failed(
                f"boundary {b}'s committed sketch {committed} is not the sketch of its committed "
                "state: the trace's sketches are not of the states the node trained through",
                sketch_mismatch_boundary=b,
            )
        sketches[b] = mine
    for b in plan_.sketches:
        try:
            check_sketch(states[(b, SKETCH_REQUEST)])
        except SketchError as exc:  # deliveries are checked: a blob store that was altered
            return failed(f"boundary {b}'s delivered sketch: {exc}")
        sketches[b] = states[(b, SKETCH_REQUEST)]

    gap, allowed = last_gap(sketches[plan_.last], submitted, packet, _hash(hashes[plan_.last]))
    if not gap <= allowed:
        why = (
            f"the submitted pseudo-gradient is not base minus the weights of the trace's last "
            f"boundary {plan_.last}: their sketches differ by {gap:.3g} > {allowed:.3g} (the "
            "packet's rounding bound): it is not the work the signed trace commits"
        )
        return failed(why, last_boundary_error=gap, last_boundary_allowed=allowed)
    if plan_.origin:
        pass  # boundary 0 is the origin (``base`` here), checked by ledger.judge.origin_check
    elif 0 in plan_.segments and plan_.public_start and 0 not in plan_.full:
        public = {f"weights/{n}": t.detach().float().contiguous() for n, t in base.items()}
        if hashes[0] != "0x" + state_hash(public).hex():
            why = (
                f"boundary 0 commits state {hashes[0]}, not the round's base with a fresh "
                "AdamW: the node's round did not start from the checkpoint it signed"
            )
            return failed(why, start_error=math.inf)
    elif 0 in plan_.full:  # moved in full (a carried AdamW, a sparse packet): weights = base
        start0 = states[(0, STATE_REQUEST)]
        start = {n[len("weights/") :]: t for n, t in start0.items() if n.startswith("weights/")}
        moved = relative_error(start, {n: t.float() for n, t in base.items()})
        if not moved <= LAST_BOUNDARY_TOLERANCE:
            why = (
                f"boundary 0 is not the round's committed base (relative L2 distance {moved:.3g}):"
                " the node's round did not start from the checkpoint it signed"
            )
            return failed(why, start_error=moved)
    cpu = 0.0
    passed: list[str] = []
    for j in plan_.segments:
        first, steps = plan_.span(j)
        if j in plan_.full:
            begin = replay_state(states[(j, STATE_REQUEST)])
        else:
            begin = fresh_state({n: t.float() for n, t in base.items()})
        end = EndSketch(sketches[j + 1], _hash(hashes[j + 1]), base)
        verdict = audit_span(begin, end, inputs, corpus, first=first, steps=steps,
                             tolerance=tolerance, threads=threads,
                             moved_to=moved_to if j == 0 else None)  # fmt: skip
        cpu += verdict.cpu_seconds
        if not verdict.passed and j in (excused or {}):
            assert excused is not None
            passed.append(f"segment {j}: {verdict.reason}, but its one-step verdict holds: "
                          f"{excused[j]}")  # fmt: skip
            continue
        if not verdict.passed:
            evidence = common | {
                "segment": j, "first_step": first, "steps": steps, "segment_error": verdict.error,
                "start_boundary": j, "end_boundary": j + 1,
            }  # fmt: skip
            return SegmentOutcome(False, cpu, f"segment {j}: {verdict.reason}", evidence)
        passed.append(f"segment {j}: {verdict.reason}")
    return SegmentOutcome(True, cpu, "; ".join(passed), common)


def _hash(hex_: str) -> bytes:
    return bytes.fromhex(hex_.removeprefix("0x"))


def last_gap(
    sketch: Tensors, submitted: Tensors, packet: Packet | None, last_hash: bytes
) -> tuple[float, float]:
    """How far the last boundary's committed sketch is from the sketch of the submitted
    pseudo-gradient (its weights part is the sketch of ``base - last``), and how far it may be:
    the packet's :func:`rounding_bound` x :data:`SKETCH_SLACK` plus
    :data:`LAST_BOUNDARY_TOLERANCE` of the sketch's norm (float64 sums in another order)."""
    proj = Projection.of(last_hash, {n: t.shape for n, t in submitted.items()})
    mine = proj.apply({n: t.float() for n, t in submitted.items()})
    gap = distance(sketch["sketch/weights"], mine)
    allowed = SKETCH_SLACK * rounding_bound(packet, submitted)
    return gap, allowed + LAST_BOUNDARY_TOLERANCE * float(mine.norm())
