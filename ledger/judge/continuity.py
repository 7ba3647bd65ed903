"""The carried AdamW's continuity: a round's boundary 0 holds the AdamW state the node's previous
round ended with, or a fresh one (docs/ledger.md, "The carried state's continuity").

With the inner AdamW carried across rounds (reference.inner.CARRY_STATE), boundary 0 of a node's
round commits the moments it starts from. The segment audit replays from a boundary's committed
state, so moments the node made up would be confirmed by the replay: the worst a node could do
with them is steer its update anywhere (an exp_avg of its choosing over a near-zero exp_avg_sq
moves a coordinate by up to ``lr x |exp_avg| / eps`` a step) and be paid as if it trained. What
bounds it is this check, run on every audited carried node-round whatever segment is drawn:

- each boundary's sketch commits the hash of its state's AdamW entries (reference.sketch
  ``sketch/adam``, exact: protocol.hashing);
- boundary 0's AdamW hash must be :data:`reference.sketch.FRESH_ADAM` (a node may always start
  fresh: a rejoin, a checkpoint load, a changed config), or the AdamW hash of the last boundary
  of the node's own round r-1 (its sketch, a few KiB, is asked for like any boundary's, against
  round r-1's signed ``traceRoot``);
- a node that attested no traced round r-1 has nothing to carry: only a fresh AdamW passes.

A node that withholds its round r-1 boundary past the deadline fails, as for any boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlmodel import Session

from ledger.core.models import (
    SKETCH_REQUEST,
    STATE_REQUEST,
    Attestation,
    BoundaryRequest,
    utcnow,
)
from ledger.judge.boundaries import withheld_reason
from ledger.judge.segments import (
    Need,
    ask_earlier,
    existing,
    load_states,
    pending,
    previous_attestation,
)
from reference.sketch import FRESH_ADAM, SketchError, adam_hash, check_sketch, committed_adam
from reference.trace import boundary_steps

if TYPE_CHECKING:
    from ledger.judge.entries import Context
    from ledger.judge.tensors import Tensors


@dataclass(frozen=True)
class Continuity:
    """The check's outcome: ``reason`` says which start it found (or what is wrong);
    ``evidence`` is what a fraud record adds."""

    passed: bool
    reason: str
    evidence: dict[str, object]


def previous_needs(att: Attestation | None, ctx: Context) -> list[Need]:
    """What the check reads of the node's round r-1 (``att``, its traced attestation,
    :func:`ledger.judge.segments.previous_attestation`): its last boundary's sketch (none when
    the node attested no traced round r-1: only a fresh start passes then)."""
    if att is None:
        return []
    last = len(boundary_steps(att.inner_steps, ctx.config_of(att).trace_interval)) - 1
    return [(last, SKETCH_REQUEST)]


def start_adam(requests: dict[Need, BoundaryRequest], states: dict[Need, Tensors]) -> bytes:
    """Boundary 0's AdamW hash, from its full state when the audit moved it, else from its
    delivered sketch (the plan of a carried round always has one of them)."""
    if (0, STATE_REQUEST) in states:
        return adam_hash(states[(0, STATE_REQUEST)])
    sketch = states[(0, SKETCH_REQUEST)]
    check_sketch(sketch)
    return committed_adam(sketch)


def check(  # noqa: PLR0917 - the node-round's key, its deliveries, and where to ask
    session: Session,
    ctx: Context,
    run_id: str,
    round_: int,
    node: str,
    requests: dict[Need, BoundaryRequest],
    states: dict[Need, Tensors],
    earlier: dict[str, list[Need]] | None = None,
) -> Continuity | None:
    """Whether boundary 0's AdamW state is fresh or the node's round r-1's last (module
    docstring). None while round r-1's last sketch is to be asked for (added to ``earlier``)
    or is pending."""
    try:
        start = start_adam(requests, states)
    except SketchError as exc:  # intake checks deliveries: a blob store that was altered
        return Continuity(False, f"boundary 0's delivered sketch: {exc}", {})
    evidence: dict[str, object] = {"boundary0_adam": "0x" + start.hex()}
    if start == FRESH_ADAM:
        return Continuity(True, "boundary 0 starts a fresh AdamW", evidence)
    needs = previous_needs(previous_attestation(session, run_id, round_, node), ctx)
    if not needs:
        why = (
            f"boundary 0 carries an AdamW state (0x{start.hex()}), but the node attested no "
            f"traced round {round_ - 1} to carry it from: a round after a gap starts fresh"
        )
        return Continuity(False, why, evidence)
    found = existing(session, run_id, round_ - 1, node, needs)
    if not found:
        ask_earlier(earlier, node, needs)
        return None
    if pending(found, utcnow()):
        return None
    request = found[needs[0]]
    reason = withheld_reason(request, utcnow())
    if reason is not None:
        return Continuity(False, f"round {round_ - 1}'s last boundary: {reason}", evidence)
    try:
        (sketch,) = load_states(ctx.blobs, found).values()
        check_sketch(sketch)
    except (LookupError, SketchError) as exc:
        return Continuity(False, f"round {round_ - 1}'s last boundary sketch: {exc}", evidence)
    before = committed_adam(sketch)
    last = needs[0][0]
    evidence["previous_last_adam"] = "0x" + before.hex()
    evidence["previous_last_boundary"] = last
    if start != before:
        why = (
            f"boundary 0's AdamW state 0x{start.hex()} is neither fresh nor the one the node's "
            f"round {round_ - 1} ended with (0x{before.hex()}, its boundary {last}): moments "
            "the node did not train to"
        )
        return Continuity(False, why, evidence)
    return Continuity(True, f"boundary 0 carries round {round_ - 1}'s AdamW state", evidence)
