"""Where a round's inner steps started: the rule an audit needs before it replays an overlapped
node (trainer.round.overlap).

A lockstep node trains round r from the base checkpoint its attestation names. A node on the
overlap schedule trains round r while round r-1 is still in flight, from
``S_r = B - (origin_{r-1} - end_{r-1})``: the newest base it holds (the checkpoint round r-1's
attestation names as its base) less its own round r-1 progress (fp32, the same subtraction as
``Overlap.worked``). Replaying such a round from its attested base is wrong (measured on the
tiny model, 20 inner steps: the replayed pseudo-gradient is 0.96 relative L2 away from the
honest one, against the replay tolerance of 1e-2), so an audit must replay it from its
committed origin (boundary 0's weights, reference.trace), and that origin must be one of three
public points, bit for bit:

- the round's attested base (lockstep, or the first round after the in-flight round landed);
- round r-1's committed last boundary: the node's own end of round r-1 (the bounded overlap,
  trainer.round.bounded: round r-1's average lands at round r's first boundary after step 0,
  where the weights move by ``base - origin``, reference.outer.moved; the round's sketches and
  pseudo-gradient are taken from its attested base as in lockstep, and the audit replays
  segment 0 from the origin and moves it the same way, ledger.judge.replay.audit_span);
- ``flatten(base_{r-1}) - (flatten(origin_{r-1}) - flatten(end_{r-1}))`` from round r-1's
  attested base and its committed boundary 0 and last boundary (overlap).

:func:`check_origin` is that rule. The segment audit applies it to a round whose deliveries show
it did not start from its attested base, then replays the round from that origin
(ledger.judge.audits, ``SegmentPlan.origin``); the sparse check applies it to boundary 0, the
packet's origin (ledger.judge.sparse_check). docs/ledger.md, "Auditing an overlapped round".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from protocol.hashing import hash_state_dict
from reference.outer import FlatLayout
from reference.sketch import SketchError, make_sketch
from reference.trace import WEIGHTS, state_hash

Tensors = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class OriginVerdict:
    passed: bool
    schedule: str  # "lockstep", "bounded", "overlap" or "" (none of them)
    reason: str


@dataclass(frozen=True)
class PreviousRound:
    """Round r-1 of the same node: its attested base weights and its committed boundary 0 and
    last boundary states."""

    base: Tensors
    start: Tensors
    end: Tensors
    end_sketch: str | None = None
    """The last boundary's committed sketch hash (0x-hex, as its delivery names it): which base
    round r-1's sketches were taken from, and so what its packet was measured from
    (:func:`packet_origin`); None: not known."""


def weights_of(state: Tensors) -> dict[str, torch.Tensor]:
    """A boundary state's weights by parameter name (a checkpoint's names pass unchanged)."""
    if any(n.startswith(WEIGHTS) for n in state):
        return {n.removeprefix(WEIGHTS): t for n, t in state.items() if n.startswith(WEIGHTS)}
    return dict(state)


def overlap_origin(prev: PreviousRound, layout: FlatLayout) -> torch.Tensor:
    """``S_r``, flat: the node's round r-1 base less its own round r-1 progress."""
    progress = layout.flatten(weights_of(prev.start)) - layout.flatten(weights_of(prev.end))
    return layout.flatten(weights_of(prev.base)) - progress


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def check_origin(
    origin: Tensors, base: Tensors, prev: PreviousRound | None = None
) -> OriginVerdict:
    """Whether round r's committed ``origin`` (boundary 0) is its attested ``base`` or, given
    round r-1 (``prev``), the bounded overlap's start (round r-1's last boundary) or the
    one-round overlap's; equality is bit for bit."""
    layout = FlatLayout({n: t.shape for n, t in weights_of(base).items()})
    start = layout.flatten(weights_of(origin))
    if _same_bits(start, layout.flatten(weights_of(base))):
        return OriginVerdict(True, "lockstep", "the round started from its attested base")
    if prev is not None:
        if _same_bits(start, layout.flatten(weights_of(prev.end))):
            return OriginVerdict(True, "bounded", "the round started from the node's own end of "
                                 "the last round, moved to its base at its first boundary "
                                 "(the bounded overlap)")  # fmt: skip
        want = overlap_origin(prev, layout)
        if _same_bits(start, want):
            return OriginVerdict(True, "overlap", "the round started from the last round's base "
                                 "less the node's own last-round progress")  # fmt: skip
    return OriginVerdict(False, "", (
        "the committed origin (boundary 0) of the round is neither its attested base nor "
        + ("the last round's committed end (the bounded overlap) nor the overlap schedule's "
           "start from the last round's committed state"
           if prev is not None else "(no last round given to check an overlap start against)")
    ))  # fmt: skip


def packet_origin(prev: PreviousRound) -> dict[str, torch.Tensor]:
    """The weights round r-1's packet was measured from (what its error feedback left is
    recomputed from): its attested base in lockstep and on the bounded overlap, whose last
    boundary's committed sketch is taken from that base (bound by its leaf); else its boundary 0
    (the one-round overlap measures from its origin)."""
    base, start = weights_of(prev.base), weights_of(prev.start)
    layout = FlatLayout({n: t.shape for n, t in base.items()})
    if _same_bits(layout.flatten(start), layout.flatten(base)):
        return base
    if prev.end_sketch is not None:
        try:
            mine = make_sketch(prev.end, base, state_hash(prev.end))
        except SketchError:
            return start
        if "0x" + hash_state_dict(mine).hex() == prev.end_sketch.lower():
            return base
    return start


def audit_bases(
    verdict: OriginVerdict, origin: Tensors, base: Tensors
) -> tuple[Tensors, Tensors | None]:
    """For a round whose ``origin`` (boundary 0) passed the origin check (``verdict``), the
    weights its sketches and packet are measured from (the one-round overlap's origin, else its
    attested ``base``, which a lockstep origin equals bit for bit), and the base its segment 0's
    replay moves to at its end (the bounded overlap's landing: ``base``; else None)."""
    if verdict.schedule == "overlap":
        return {n: t.float() for n, t in weights_of(origin).items()}, None
    return base, (base if verdict.schedule == "bounded" else None)
