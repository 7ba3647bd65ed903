"""The segment audit on sketches (ledger.judge.segments, reference.sketch): an audit moves at
most one full state, the segment's start (none for a segment 0 at the public base); the
segment's end and the round's last boundary are held to their committed sketches.

A real node's round (tiny model, H 10, boundaries every 5 steps, torch's default threads)
trains through ``InnerTrainer`` with the node's ``TraceBuilder``; the ledger's check runs on
the delivered blobs as the judge loads them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta

import pytest
import torch

from ledger.core.config import SEGMENT_TOLERANCE
from ledger.core.models import SKETCH_REQUEST, STATE_REQUEST, BoundaryRequest, utcnow
from ledger.judge.replay import ReplayInputs
from ledger.judge.segments import SegmentPlan, check_entry
from ledger.judge.usefulness import corpus_of
from protocol.hashing import hash_state_dict
from reference.checkpoint import load_weights_into
from reference.data import ShardSpec
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.sketch import make_sketch
from reference.trace import Boundary, TraceBuilder, boundary_steps
from trainer.round.recovery import genesis_checkpoint

RUN = bytes(range(32))
NODE = "0x" + "33" * 20
H, K, BATCH, LR = 10, 5, 4, 3e-3
CFG = GPTConfig.preset("tiny")
TOKENS = H * BATCH * CFG.seq_len
INPUTS = ReplayInputs(RUN, 2, NODE, TOKENS, H, LR, (10_000,), "tiny")


@dataclasses.dataclass
class Round:
    base: dict[str, torch.Tensor]
    boundaries: list[Boundary]
    states: list[dict[str, torch.Tensor]]
    pseudo_gradient: dict[str, torch.Tensor]


def _train(skip_at: int | None = None) -> Round:
    """A node's round on torch's default threads; ``skip_at``: the inner step it skips (the
    batch is not trained on, the step counter still counts it: the cheat)."""
    base = {n: t.float() for n, t in genesis_checkpoint(CFG, 0).weights.items()}
    rows = corpus_of(None).shard_rows(
        ShardSpec.for_node(RUN, 2, NODE, TOKENS, (10_000,)), CFG.seq_len
    )
    model = GPT(CFG)
    load_weights_into(model, base)
    inner = InnerTrainer(model, InnerConfig.protocol(H, LR, BATCH, carried=CARRY_STATE))
    kept: list[tuple[Boundary, dict[str, torch.Tensor]]] = []
    builder = TraceBuilder(model, base, optimizer=lambda: inner._opt,
                           keep=lambda b, s: kept.append((b, s)))  # fmt: skip
    if skip_at is not None:
        real = torch.optim.AdamW.step
        calls = [0]

        def step(self: torch.optim.AdamW, *a: object, **kw: object) -> object:
            calls[0] += 1
            if calls[0] == skip_at + 1:  # skipped: the moments and weights stay, step counts
                for group in self.param_groups:
                    for p in group["params"]:
                        self.state[p]["step"] += 1
                return None
            return real(self, *a, **kw)

        torch.optim.AdamW.step = step  # type: ignore[method-assign]
    try:
        inner.train(rows, on_boundary=builder, trace_interval=K)
    finally:
        if skip_at is not None:
            torch.optim.AdamW.step = real  # type: ignore[method-assign]
    trace = builder.trace()
    local = dict(model.named_parameters())
    g = {n: (base[n] - local[n].detach()).contiguous() for n in base}
    return Round(base, list(trace.boundaries), [s for _, s in kept], g)


@pytest.fixture(scope="module")
def honest() -> Round:
    return _train()


def _delivered(r: Round, plan: SegmentPlan) -> tuple[dict, dict]:  # type: ignore[type-arg]
    return delivered(r.boundaries, r.states, plan, r.states[0], run=RUN, node=NODE)


def delivered(
    boundaries: list[Boundary],
    states: list[dict[str, torch.Tensor]],
    plan: SegmentPlan,
    sketch_base: Mapping[str, torch.Tensor],
    *,
    run: bytes,
    node: str,
) -> tuple[dict, dict]:  # type: ignore[type-arg]
    """The requests of ``plan`` on round 2 of a node's trace as delivered, and the blobs the
    judge loads for them (a full state, or the sketch the node serves: recomputed from its kept
    state against ``sketch_base``)."""
    requests, blobs = {}, {}
    for b, what in plan.needed:
        boundary, state = boundaries[b], states[b]
        requests[(b, what)] = BoundaryRequest(
            run_id="0x" + run.hex(), round=2, node=node, boundary=b, at_step=what,
            trace_root="0x" + "00" * 32, deadline=utcnow() + timedelta(seconds=60),
            state="delivered", step=boundary.step, state_hash="0x" + boundary.state_hash.hex(),
            sketch_hash="0x" + boundary.sketch_hash.hex(),
        )  # fmt: skip
        if what == STATE_REQUEST:
            blobs[(b, what)] = state
        else:
            sketch = make_sketch(state, sketch_base, boundary.state_hash)
            assert hash_state_dict(sketch) == boundary.sketch_hash  # the node's own answer
            blobs[(b, what)] = sketch
    return requests, blobs


def _check(r: Round, plan: SegmentPlan, submitted: dict[str, torch.Tensor] | None = None,
           blobs: dict | None = None):  # type: ignore[no-untyped-def,type-arg]  # fmt: skip
    requests, delivered = _delivered(r, plan)
    return check_entry(
        r.pseudo_gradient if submitted is None else submitted, None, r.base, INPUTS,
        corpus_of(None), plan, requests, delivered if blobs is None else blobs,
        tolerance=SEGMENT_TOLERANCE, threads=1,
    )  # fmt: skip


def _plan(*segments: int) -> SegmentPlan:
    return SegmentPlan(tuple(segments), tuple(boundary_steps(H, K)), public_start=True)


def test_an_honest_node_passes_moving_one_full_state(honest: Round) -> None:
    plan = _plan(1)
    assert plan.needed == [(1, STATE_REQUEST), (2, SKETCH_REQUEST)]  # segment 1 ends at the last
    outcome = _check(honest, plan)
    assert outcome.passed, outcome.reason
    assert "committed sketch of its end state" not in outcome.reason
    full = sum(t.numel() * t.element_size() for t in honest.states[1].values())
    sketch = sum(t.numel() * t.element_size() for t in make_sketch(
        honest.states[2], honest.base, honest.boundaries[2].state_hash).values())  # fmt: skip
    assert sketch == 3 * 1024 * 8 + 8 + 32 and sketch < full / 50  # tiny: 1.4 MB a state
    # a carried round's audit also reads boundary 0's sketch: the AdamW state it starts from
    carried = dataclasses.replace(plan, public_start=False)
    assert carried.needed == [(1, STATE_REQUEST), (0, SKETCH_REQUEST), (2, SKETCH_REQUEST)]


def test_a_segment_at_the_public_base_moves_no_full_state(honest: Round) -> None:
    plan = _plan(0)
    assert plan.full == [] and plan.needed == [(0, SKETCH_REQUEST), (1, SKETCH_REQUEST),
                                               (2, SKETCH_REQUEST)]  # fmt: skip
    outcome = _check(honest, plan)
    assert outcome.passed, outcome.reason
    carried = dataclasses.replace(plan, public_start=False)  # a carried AdamW: boundary 0 moves
    assert carried.full == [0]
    # a boundary 0 that commits another state than the public base (a leaf delivered as such)
    requests, blobs = _delivered(honest, plan)
    requests[(0, SKETCH_REQUEST)].state_hash = "0x" + honest.boundaries[1].state_hash.hex()
    bad = check_entry(honest.pseudo_gradient, None, honest.base, INPUTS, corpus_of(None), plan,
                      requests, blobs, tolerance=SEGMENT_TOLERANCE, threads=1)  # fmt: skip
    assert not bad.passed and "not the round's base with a fresh AdamW" in bad.reason


def test_a_skipped_step_fails_on_the_sketch(honest: Round) -> None:
    cheat = _train(skip_at=7)  # inside segment 1 (steps 5..9)
    outcome = _check(cheat, _plan(1))
    assert not outcome.passed
    assert outcome.reason.startswith("segment 1: segment replay of steps 5..9")
    assert "committed sketch of its end state" in outcome.reason
    assert float(str(outcome.evidence["segment_error"])) > 10 * SEGMENT_TOLERANCE
    assert _check(cheat, _plan(0)).passed  # the segment without it passes: only one is drawn


def test_a_sketch_that_is_not_of_its_state_and_a_pseudo_gradient_off_the_trace_fail(
    honest: Round,
) -> None:
    plan = _plan(1)
    requests, blobs = _delivered(honest, plan)
    # the full start state delivered with another boundary's committed sketch
    lying = dict(requests)
    lying[(1, STATE_REQUEST)] = requests[(1, STATE_REQUEST)].model_copy(
        update={"sketch_hash": "0x" + honest.boundaries[2].sketch_hash.hex()})  # fmt: skip
    outcome = check_entry(honest.pseudo_gradient, None, honest.base, INPUTS, corpus_of(None),
                          plan, lying, blobs, tolerance=SEGMENT_TOLERANCE, threads=1)  # fmt: skip
    assert not outcome.passed and "is not the sketch of its committed state" in outcome.reason
    # a pseudo-gradient 0.1% off the trace's last boundary (fp32: the sketch binds exactly)
    off = {n: t * 1.001 for n, t in honest.pseudo_gradient.items()}
    bad = _check(honest, plan, submitted=off)
    assert not bad.passed and "not base minus the weights of the trace's last" in bad.reason


def test_an_int8_packet_is_bound_to_the_last_sketch_within_its_rounding(honest: Round) -> None:
    """An int8 packet rounds each value by up to half a code: the honest packet's distance from
    the last boundary's sketch stays well inside the bound the packet's scales give, a packet
    of a pseudo-gradient 5% off does not."""
    from ledger.judge.segments import last_gap
    from reference.codec import decode, quantize
    from reference.outer import FlatLayout
    from reference.settings import WireFormat

    last = honest.boundaries[-1]
    sketch = make_sketch(honest.states[-1], honest.base, last.state_hash)
    layout = FlatLayout({n: t.shape for n, t in honest.pseudo_gradient.items()})

    def gap(scale: float) -> tuple[float, float]:
        g = {n: t * scale for n, t in honest.pseudo_gradient.items()}
        packet = quantize(layout.flatten(g), WireFormat.INT8)
        return last_gap(sketch, layout.unflatten(decode(packet)), packet, last.state_hash)

    honest_gap, allowed = gap(1.0)
    assert 0 < honest_gap < allowed / 2
    off, allowed_off = gap(1.05)
    assert off > allowed_off
    exact, slack = last_gap(sketch, honest.pseudo_gradient, None, last.state_hash)
    assert exact == 0.0 and slack > 0  # fp32: the same bits
