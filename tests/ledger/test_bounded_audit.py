"""The audit of a round on the bounded overlap (trainer.round.bounded): it starts from the node's
own end of round r-1 while round r-1's average is in flight, lands that average at its first
boundary after step 0 and moves the weights trained so far by ``base - origin``
(reference.outer.moved); its sketches and pseudo-gradient are taken from its attested base.

Real rounds of the node's arithmetic (trainer.round.diloco: the tiny model, H 10, boundaries
every 5 steps, the protocol's inner mode, the run's real shards) are checked the way the judge
checks them: the origin rule (ledger.judge.origin_check), the segment replay with the move
(ledger.judge.segments.check_entry, ``moved_to``) and the sparse packet's recomputation from the
attested base (ledger.judge.sparse_check)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
import torch

from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from ledger.core.models import STATE_REQUEST
from ledger.judge.origin_check import PreviousRound, audit_bases, check_origin
from ledger.judge.replay import ReplayInputs
from ledger.judge.segments import SegmentPlan, check_entry
from ledger.judge.sparse_check import carried_residual, check_sparse_round
from ledger.judge.usefulness import corpus_of
from protocol.errors import ConfigError
from protocol.hashing import hash_state_dict
from reference.bisect import Bisection, as_segment_state, check_step, schedule_step, step_config
from reference.data import ShardSpec
from reference.inner import CARRY_STATE, InnerConfig
from reference.model import GPT, GPTConfig
from reference.outer import OuterState
from reference.segment import replay_segment, segment_rows
from reference.trace import Boundary, boundary_steps, residual_entries
from reference.verdict import Evidence, make_evidence, recheck
from tests.ledger.test_sketch_audit import delivered
from trainer.network.comm import SoloAverager
from trainer.round.diloco import DiLoCo, LocalWork
from trainer.round.runconfig import RunConfig

RUN = bytes(range(32))
NODE = "0x" + "44" * 20
H, K, BATCH, LR = 10, 5, 4, 3e-3
CFG = GPTConfig.preset("tiny")
TOKENS = H * BATCH * CFG.seq_len
Tensors = dict[str, torch.Tensor]


@dataclasses.dataclass
class Round:
    base: Tensors  # the attested base: the checkpoint the round's attestation names
    work: LocalWork
    boundaries: list[Boundary]
    states: list[Tensors]


def _rows(r: int) -> torch.Tensor:
    spec = ShardSpec.for_node(RUN, r, NODE, TOKENS, (10_000,))
    return corpus_of(None).shard_rows(spec, CFG.seq_len)


def _kept() -> tuple[list[tuple[Boundary, Tensors]], Callable[[Boundary, Tensors], None]]:
    kept: list[tuple[Boundary, Tensors]] = []
    return kept, lambda b, s: kept.append((b, s))


def _round(base: Tensors, work: LocalWork, kept: list[tuple[Boundary, Tensors]]) -> Round:
    return Round(base, work, [b for b, _ in kept], [s for _, s in kept])


def _two_rounds(wire: str, move: float = 1.0) -> tuple[Round, Round]:
    """Round 1 in lockstep from the genesis base; round 2 on the bounded overlap from round 1's
    end, round 1 landing (a solo outer step) at round 2's boundary 1. ``move``: the share of
    ``base - origin`` the node moves by (1: honest)."""
    model = GPT(CFG, seed=0)
    diloco = DiLoCo(model, OuterState.from_model(model))
    settings = RunConfig.make(inner_steps=H, inner_lr=LR, batch_size=BATCH, trace_interval=K,
                              wire_format=wire).settings  # fmt: skip
    layout = diloco.state.layout
    base1 = layout.unflatten(diloco.state.base.clone())
    kept1, keep1 = _kept()
    w1 = diloco.train_local(_rows(1), settings, keep=keep1)
    end1 = layout.flatten(dict(model.named_parameters()))  # the node's own end of round 1
    if move != 1.0:  # a node that moves by something else than base - origin
        honest = diloco.land_and_move

        def land_and_move(landing: Callable[[], None], start: torch.Tensor) -> None:
            honest(landing, start)
            diloco.load_flat(layout.flatten(dict(model.named_parameters()))
                             + (move - 1.0) * (diloco.state.base - start))  # fmt: skip

        diloco.land_and_move = land_and_move  # type: ignore[method-assign]

    def land() -> None:  # round 1's average (a solo run: its own packet) and outer step
        diloco.finish_round(w1, SoloAverager(), settings)

    kept2, keep2 = _kept()
    w2 = diloco.train_local(_rows(2), settings, start=end1, keep=keep2, residual=w1.residual,
                            landing=land)  # fmt: skip
    base2 = layout.unflatten(diloco.state.base.clone())
    return _round(base1, w1, kept1), _round(base2, w2, kept2)


@pytest.fixture(scope="module")
def dense() -> tuple[Round, Round]:
    return _two_rounds("fp32")


@pytest.fixture(scope="module")
def sparse() -> tuple[Round, Round]:
    return _two_rounds("sparse")


def _prev(r1: Round) -> PreviousRound:
    return PreviousRound(r1.base, r1.states[0], r1.states[-1])


def _delivered(r: Round, plan: SegmentPlan) -> tuple[dict, dict]:  # type: ignore[type-arg]
    """The deliveries of ``plan``; the node serves its sketches against the attested base."""
    return delivered(r.boundaries, r.states, plan, r.base, run=RUN, node=NODE)


def _audit(r1: Round, r2: Round, *, move: bool = True):  # type: ignore[no-untyped-def]
    """The judge's segment audit of round 2 from its origin, every segment drawn."""
    marks = tuple(boundary_steps(H, K))
    plan = SegmentPlan(tuple(range(len(marks) - 1)), marks, public_start=False, origin=True)
    requests, blobs = _delivered(r2, plan)
    verdict = check_origin(blobs[(0, STATE_REQUEST)], r2.base, _prev(r1))
    sketch_base, moved_to = audit_bases(verdict, blobs[(0, STATE_REQUEST)], r2.base)
    inputs = ReplayInputs(RUN, 2, NODE, TOKENS, H, LR, (10_000,), "tiny")
    layout = OuterState.from_model(GPT(CFG, seed=0)).layout
    return verdict, check_entry(
        layout.unflatten(r2.work.pseudo_gradient), None, sketch_base, inputs, corpus_of(None),
        plan, requests, blobs, tolerance=SEGMENT_TOLERANCE, threads=1,
        moved_to=moved_to if move else None,
    )  # fmt: skip


def test_a_bounded_round_starts_from_the_nodes_own_last_end(dense: tuple[Round, Round]) -> None:
    r1, r2 = dense
    assert not check_origin(r2.states[0], r2.base).passed, "its origin is not its base"
    verdict = check_origin(r2.states[0], r2.base, _prev(r1))
    assert verdict.passed and verdict.schedule == "bounded", verdict.reason
    # measured from the base that landed at boundary 1, bit for bit as the ledger recomputes it
    layout = OuterState.from_model(GPT(CFG, seed=0)).layout
    last = {n.removeprefix("weights/"): t for n, t in r2.states[-1].items()
            if n.startswith("weights/")}  # fmt: skip
    assert torch.equal(r2.work.pseudo_gradient, layout.flatten(r2.base) - layout.flatten(last))


def test_a_start_elsewhere_than_the_last_end_fails(dense: tuple[Round, Round]) -> None:
    r1, r2 = dense
    shifted = dict(r2.states[0])
    name = next(n for n in shifted if n.startswith("weights/"))
    shifted[name] = shifted[name] + 1e-3
    verdict = check_origin(shifted, r2.base, _prev(r1))
    assert not verdict.passed and "bounded overlap" in verdict.reason


def test_the_segment_audit_replays_segment_0_through_the_move(dense: tuple[Round, Round]) -> None:
    r1, r2 = dense
    verdict, outcome = _audit(r1, r2)
    assert verdict.schedule == "bounded"
    assert outcome.passed, outcome.reason
    _, unmoved = _audit(r1, r2, move=False)  # the guard: without the move segment 0 fails
    assert not unmoved.passed and unmoved.reason.startswith("segment 0:"), unmoved.reason


def test_a_node_that_moves_by_anything_else_fails_segment_0() -> None:
    r1, r2 = _two_rounds("fp32", move=1.003)  # 0.3 % more than the move
    verdict, outcome = _audit(r1, r2)
    assert verdict.passed and verdict.schedule == "bounded", verdict.reason
    assert not outcome.passed and outcome.reason.startswith("segment 0:"), outcome.reason


def test_a_bounded_sparse_packet_is_recomputed_from_the_attested_base(
    sparse: tuple[Round, Round],
) -> None:
    _, r2 = sparse
    assert r2.work.packet is not None
    start, end = r2.states[0], r2.states[-1]
    verdict = check_sparse_round(r2.work.packet, start, end, origin=r2.base)
    assert verdict.passed, verdict.reason
    from_start = check_sparse_round(r2.work.packet, start, end)  # boundary 0 is not its origin
    assert not from_start.passed and "differs from the signed packet" in from_start.reason


def test_the_one_step_verdict_of_segment_0s_last_step_replays_the_move(
    dense: tuple[Round, Round],
) -> None:
    """A bounded round's segment 0 that fails the screen is bisected (ledger.judge.bisect): its
    last step ends at boundary 1, after the landing's move, so the one-step check moves the
    replayed step from boundary 0 to the attested base (reference.bisect.check_step ``move``),
    and so does ``coloco audit``'s re-check of the evidence (reference.verdict, ``moved_to``).
    The honest step holds that way, and differs without the move."""
    _, r2 = dense
    inner = InnerConfig.protocol(H, LR, BATCH, carried=CARRY_STATE)
    rows, b0 = _rows(2), as_segment_state(r2.states[0])
    before = replay_segment(b0, segment_rows(rows, 0, K - 1, BATCH),
                            InnerConfig.protocol(K - 1, LR, BATCH, carried=CARRY_STATE), CFG,
                            first_step=schedule_step(b0))  # fmt: skip
    batch = rows[(K - 1) * BATCH : K * BATCH]
    one = step_config(inner, schedule_step(before))
    after = r2.states[1]
    move = (r2.states[0], r2.base)
    moved = check_step(before, after, batch, one, CFG, tolerance=ONE_STEP_TOLERANCE, move=move)
    assert moved.holds, moved.error
    unmoved = check_step(before, after, batch, one, CFG, tolerance=ONE_STEP_TOLERANCE)
    assert not unmoved.holds, unmoved.error

    names = ("0x" + hash_state_dict(r2.states[0]).hex(), "0x" + hash_state_dict(r2.base).hex())
    verdict = Bisection(K - 1, moved, before, dict(after), (), one.lr)
    evidence, blobs = make_evidence(verdict, batch, inner, CFG, run_id="0x" + RUN.hex(),
                                    round=2, node=NODE, segment=(0, K), moved=names)  # fmt: skip
    blobs |= {names[0]: r2.states[0], names[1]: r2.base}
    parsed = Evidence.from_json(json.loads(evidence.text()))
    assert parsed.moved_to == names[1] and recheck(parsed, blobs.__getitem__).holds
    bare = dataclasses.replace(parsed, moved_from="", moved_to="")  # the move left out
    assert not recheck(bare, blobs.__getitem__).holds
    # a ledger calling it a fraud: the step's top (reference.confirm) moves as the step does,
    # so it does not confirm it, and the whole step refutes it
    false = recheck(dataclasses.replace(parsed, holds=False), blobs.__getitem__)
    assert false.holds and false.scope == "step", false.to_json()
    # a base blob that lacks a weight would leave it unmoved (the step would differ by the move)
    name = next(iter(r2.base))
    short = {k: v for k, v in r2.base.items() if k != name}
    short_hash = "0x" + hash_state_dict(short).hex()
    lacking = dataclasses.replace(parsed, holds=False, moved_to=short_hash)
    with pytest.raises(ConfigError, match="the base has no"):
        recheck(lacking, {**blobs, short_hash: short}.__getitem__)


def test_the_residual_a_bounded_round_left_is_recomputed_from_its_attested_base(
    sparse: tuple[Round, Round],
) -> None:
    """Round 3 starts from the residual round 2's packet left. Round 2 was bounded: its packet
    was measured from its attested base, which its last boundary's committed sketch names
    (``origin_check.packet_origin``); recomputed from its boundary 0, as for the one-round
    overlap, the residual would read as mass the node never sent (an honest bounded sparse node
    was slashed in its third round so)."""
    _, r2 = sparse
    assert r2.work.residual is not None
    layout = OuterState.from_model(GPT(CFG, seed=0)).layout
    start3 = {**r2.states[-1], **residual_entries(r2.work.residual, layout)}
    sketch = "0x" + r2.boundaries[-1].sketch_hash.hex()
    prev = PreviousRound(r2.base, r2.states[0], r2.states[-1], sketch)
    verdict = carried_residual(start3, prev)
    assert verdict.passed and "the residual its last round left" in verdict.reason, verdict
    unknown = carried_residual(start3, dataclasses.replace(prev, end_sketch=None))
    assert not unknown.passed and "mass the node never sent" in unknown.reason, unknown
