"""The ledger's segment audit (ledger.judge.replay.audit_segment): the rows of a segment are
derived from the public shard as the node read them, an honest node on two threads passes on a
one-thread ledger, and a segment with a skipped step fails with a reason naming its steps."""

from __future__ import annotations

import pytest
import torch

from ledger.core.config import SEGMENT_TOLERANCE
from ledger.judge.replay import ReplayInputs, audit_segment
from ledger.judge.usefulness import corpus_of
from reference.data import ShardSpec
from reference.inner import CARRY_STATE, InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.segment import STEP, capture_state, fresh_state, load_state
from trainer.round.recovery import genesis_checkpoint

RUN = bytes(range(32))
NODE = "0x" + "22" * 20
H, K, BATCH, LR = 10, 5, 4, 3e-3


def test_segments_of_a_two_thread_node_pass_and_a_skipped_step_fails() -> None:
    cfg = GPTConfig.preset("tiny")
    base = {n: t.float() for n, t in genesis_checkpoint(cfg, 0).weights.items()}
    tokens = H * BATCH * cfg.seq_len
    corpus = corpus_of(None)
    rows = corpus.shard_rows(ShardSpec.for_node(RUN, 3, NODE, tokens, (10_000,)), cfg.seq_len)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the node: torch's default threads here
        model = GPT(cfg)
        model.load_state_dict(base, strict=False)
        trainer = InnerTrainer(model, InnerConfig.protocol(K, LR, BATCH, carried=CARRY_STATE))
        states = [fresh_state(base)]
        for j in range(H // K):
            trainer.train(rows[j * K * BATCH : (j + 1) * K * BATCH])
            states.append(capture_state(model, trainer.optimizer()))
        skipping = GPT(cfg)  # the cheater's second segment: its last step skipped
        skipper = InnerTrainer(
            skipping, InnerConfig.protocol(K - 1, LR, BATCH, carried=CARRY_STATE)
        )
        load_state(skipping, skipper.optimizer(), states[1])
        skipper.train(rows[K * BATCH : (2 * K - 1) * BATCH])
        skipped = {**capture_state(skipping, skipper.optimizer()), STEP: states[2][STEP]}
    finally:
        torch.set_num_threads(saved)
    inputs = ReplayInputs(RUN, 3, NODE, tokens, H, LR, (10_000,), "tiny")
    for j in range(H // K):
        verdict = audit_segment(
            states[j], states[j + 1], inputs, corpus, segment=j, segment_steps=K,
            tolerance=SEGMENT_TOLERANCE, threads=1,
        )  # fmt: skip
        assert verdict.passed, verdict.reason
        assert verdict.error <= SEGMENT_TOLERANCE and verdict.first_step == j * K
    cheat = audit_segment(states[1], skipped, inputs, corpus, segment=1, segment_steps=K,
                          tolerance=SEGMENT_TOLERANCE, threads=1)  # fmt: skip
    assert not cheat.passed and cheat.error > 10 * SEGMENT_TOLERANCE
    assert "steps 5..9" in cheat.reason
    with pytest.raises(ValueError, match="outside the round"):
        audit_segment(states[0], states[1], inputs, corpus, segment=2, segment_steps=K,
                      tolerance=SEGMENT_TOLERANCE)  # fmt: skip


def test_the_segment_draw_is_fixed_by_the_seed_and_spread_over_the_segments() -> None:
    from ledger.judge.segments import drawn_segments

    seed = bytes(range(32))
    assert drawn_segments(seed, NODE, 10, 1) == drawn_segments(seed, NODE, 10, 1)
    assert drawn_segments(seed, NODE, 10, 20) == list(range(10))
    two = drawn_segments(seed, NODE, 10, 2)
    assert len(set(two)) == 2 and all(0 <= j < 10 for j in two)
    counts = [0] * 10  # over 2,000 seeds each segment is drawn about 200 times
    for n in range(2000):
        (j,) = drawn_segments(n.to_bytes(32, "big"), NODE, 10, 1)
        counts[j] += 1
    assert min(counts) > 140 and max(counts) < 260, counts
    with pytest.raises(ValueError, match="positive"):
        drawn_segments(seed, NODE, 0, 1)


def test_a_state_of_another_model_fails_the_segment_instead_of_stalling_the_round() -> None:
    """A node whose committed state is not of the run's model (another preset) fails its audit
    with the reason; an exception here would leave the round unscored, retried forever."""
    small = GPTConfig.preset("tiny")
    other = {n: t.float() for n, t in genesis_checkpoint(small, 0).weights.items()}
    state = fresh_state({n: t for n, t in other.items() if not n.startswith("blocks.1.")})
    tokens = H * BATCH * small.seq_len
    inputs = ReplayInputs(RUN, 3, NODE, tokens, H, LR, (10_000,), "tiny")
    verdict = audit_segment(state, state, inputs, corpus_of(None), segment=0, segment_steps=K,
                            tolerance=SEGMENT_TOLERANCE, threads=1)  # fmt: skip
    assert not verdict.passed and verdict.error == float("inf")
    assert "cannot be replayed from the node's committed state" in verdict.reason
    assert "does not fit the model" in verdict.reason
