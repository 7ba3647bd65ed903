"""A fresh inner AdamW per round (the protocol's other mode, CARRY_STATE False) makes a round
replayable from public inputs: the same trainer object, called for a second round, computes what a
new trainer (the ledger's replay) computes, learning-rate schedule included; and the node and the
benchmark follow the one switch with the same AdamW constants in each mode."""

from __future__ import annotations

import torch

from bench.diloco import Setup, parser
from reference.inner import CARRIED_BETAS, CARRY_STATE, DEFAULT_BETAS, InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from trainer.round.diloco import RoundSettings
from trainer.round.runconfig import RunConfig

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=16)
CFG = InnerConfig(steps=4, lr=3e-3, batch_size=2, warmup_steps=3, schedule_steps=4)


def _rows(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=g)


def _params(model: GPT) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_a_second_fresh_round_equals_a_new_trainers_replay() -> None:
    base = GPT(SMALL, seed=3).state_dict()
    node_model = GPT(SMALL, seed=3)
    node = InnerTrainer(node_model, CFG, keep_state=False)
    node.train(_rows(1))  # round 1
    node_model.load_state_dict(base)
    node.train(_rows(2))  # round 2, from the same base, on other rows
    replay_model = GPT(SMALL, seed=3)
    replay_model.load_state_dict(base)
    InnerTrainer(replay_model, CFG, keep_state=False).train(_rows(2))
    assert torch.equal(_params(node_model), _params(replay_model))


def test_a_kept_state_round_is_not_what_a_replay_computes() -> None:
    """The contrast: carried AdamW state (and schedule position) changes round 2."""
    base = GPT(SMALL, seed=3).state_dict()
    node_model = GPT(SMALL, seed=3)
    node = InnerTrainer(node_model, CFG, keep_state=True)
    node.train(_rows(1))
    node_model.load_state_dict(base)
    node.train(_rows(2))
    replay_model = GPT(SMALL, seed=3)
    replay_model.load_state_dict(base)
    InnerTrainer(replay_model, CFG, keep_state=False).train(_rows(2))
    assert not torch.equal(_params(node_model), _params(replay_model))


def test_node_and_benchmark_run_the_same_inner_defaults() -> None:
    """The node and bench.diloco follow the protocol's one switch (CARRY_STATE) with the same
    AdamW constants in each mode."""
    settings = RunConfig.make(inner_steps=50).settings
    assert isinstance(settings, RoundSettings)
    assert settings.keep_inner_state is CARRY_STATE
    assert parser().parse_args([]).keep_inner_state is CARRY_STATE
    setup = Setup(model=SMALL, workers=2, rounds=1, inner_steps=2, batch=2, inner_lr=3e-3,
                  outer=settings.outer, eval_rows=4)  # fmt: skip
    for carried, bench in ((False, setup), (True, setup.carried())):
        inner = RunConfig.make(inner_steps=50, keep_inner_state=carried).settings.inner
        assert bench.keep_inner_state is carried
        assert (bench.betas, bench.eps, bench.warmup) == (
            inner.betas,
            inner.eps,
            inner.warmup_steps,
        ), carried
    assert setup.betas == DEFAULT_BETAS and setup.carried().betas == CARRIED_BETAS
