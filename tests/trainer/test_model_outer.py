"""The model's deterministic genesis, the outer Nesterov step, checkpoints and scoring."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.errors import CheckpointError, ConfigError
from protocol.hashing import hash_state_dict
from reference.checkpoint import CheckpointDir, RoundCheckpoint
from reference.data import Corpus, ShardSpec
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig, genesis_state
from reference.outer import OuterConfig, OuterState
from reference.usefulness import scoring_rows, usefulness
from trainer.round.recovery import genesis_hash

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)


def test_genesis_is_a_pure_function_of_the_seed() -> None:
    a, b, c = genesis_state(SMALL, 1), genesis_state(SMALL, 1), genesis_state(SMALL, 2)
    assert hash_state_dict(a) == hash_state_dict(b) != hash_state_dict(c)
    assert genesis_hash(SMALL, 1) == hash_state_dict(a)


def test_config_checks_name_the_bad_value() -> None:
    with pytest.raises(ConfigError, match="divisible by n_head"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ConfigError, match="unknown model preset 'huge'"):
        GPTConfig.preset("huge")
    with pytest.raises(ConfigError, match="outer momentum"):
        OuterConfig(momentum=1.5)


def test_outer_step_equals_torch_nesterov_sgd() -> None:
    torch.manual_seed(0)
    model = GPT(SMALL)
    state = OuterState.from_model(model)
    ref = [p.detach().clone().requires_grad_(True) for _, p in sorted(model.named_parameters())]
    opt = torch.optim.SGD(ref, lr=0.7, momentum=0.9, nesterov=True)
    for _ in range(3):
        g = torch.randn(state.base.numel()) * 1e-3
        state.step(g, OuterConfig(lr=0.7, momentum=0.9))
        for p, v in zip(ref, state.layout.unflatten(g).values(), strict=True):
            p.grad = v.clone()
        opt.step()
    torch.testing.assert_close(state.base, torch.cat([p.detach().reshape(-1) for p in ref]))


def test_pseudo_gradient_is_base_minus_local_and_training_lowers_loss(corpus_dir: Path) -> None:
    corpus = Corpus.from_folder(corpus_dir)
    model = GPT(SMALL)
    state = OuterState.from_model(model)
    rows = corpus.shard_rows(ShardSpec.for_node(bytes(32), 1, "0x" + "33" * 20, 32 * 4 * 20,
                                                [5000, 5000]), 32)  # fmt: skip
    result = InnerTrainer(model, InnerConfig(steps=20, lr=3e-3, batch_size=4)).train(rows)
    assert result.tokens == 20 * 4 * 32
    assert result.losses[-1] < result.losses[0]
    pg = state.pseudo_gradient(model)
    local = torch.cat([p.detach().reshape(-1) for _, p in sorted(model.named_parameters())])
    assert torch.equal(pg, state.base - local)


def test_checkpoint_round_trip_and_hash_check(tmp_path: Path) -> None:
    state = OuterState.from_model(GPT(SMALL))
    state.step(torch.full_like(state.base, 1e-3), OuterConfig())
    ckpt = RoundCheckpoint.of(state, 5, bytes(32))
    disk = CheckpointDir(tmp_path, keep=2)
    for r in (3, 4, 5):
        disk.save(RoundCheckpoint(r, ckpt.weights, ckpt.momentum))
    assert disk.rounds() == [4, 5]
    back = disk.latest()
    assert back is not None and back.round == 5
    assert back.weights_hash == ckpt.weights_hash
    restored = back.to_state()
    assert torch.equal(restored.base, state.base) and torch.equal(restored.momentum, state.momentum)
    with pytest.raises(CheckpointError, match="expected 0x"):
        RoundCheckpoint.from_bytes(ckpt.to_bytes(), expect_hash=bytes(32))
    with pytest.raises(CheckpointError, match="not a coloco checkpoint"):
        RoundCheckpoint.from_bytes(b"garbage" * 10)


def test_usefulness_tells_honest_work_from_zero_and_noise(corpus_dir: Path) -> None:
    corpus = Corpus.from_folder(corpus_dir)
    model = GPT(SMALL)
    InnerTrainer(model, InnerConfig(steps=30, lr=3e-3, batch_size=8)).train(
        corpus.random_rows(32, 240, seed=1)
    )
    state = OuterState.from_model(model)
    base = state.weights()
    spec = ShardSpec.for_node(bytes(32), 1, "0x" + "44" * 20, 32 * 8 * 20, [5000, 5000])
    InnerTrainer(model, InnerConfig(steps=20, lr=3e-3, batch_size=8)).train(
        corpus.shard_rows(spec, 32)
    )
    pg = state.layout.unflatten(state.pseudo_gradient(model))
    own, rnd = scoring_rows(corpus, spec, 32, 32)
    honest = usefulness(SMALL, base, pg, own, rnd, 0.7)
    zero = usefulness(SMALL, base, {k: torch.zeros_like(v) for k, v in pg.items()}, own, rnd, 0.7)
    gen = torch.Generator().manual_seed(3)
    noise_pg = {k: torch.randn(v.shape, generator=gen) * 0.05 for k, v in pg.items()}
    noise = usefulness(SMALL, base, noise_pg, own, rnd, 0.7)
    assert honest.own_drop > 0 and honest.random_drop > 0 and honest.score > 0.3
    assert zero.score == 0.0 and zero.own_drop == 0.0
    assert noise.score == 0.0
