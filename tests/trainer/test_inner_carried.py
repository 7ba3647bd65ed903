"""The carried inner AdamW state (``RoundSettings.keep_inner_state``, the protocol's switch
``reference.inner.CARRY_STATE``): a real :class:`~trainer.round.node.NodeRunner` keeps one AdamW
from round to round, and starts a fresh one when it adopts a state (a rejoin, a checkpoint load,
a resync) or when the inner config changes; the fresh path stays what it was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from protocol.eip712 import Eip712Domain
from protocol.keys import NodeKey
from reference.checkpoint import CheckpointDir
from reference.inner import (
    CARRIED_BETAS,
    CARRIED_EPS,
    CARRIED_WARMUP_STEPS,
    CARRY_STATE,
    DEFAULT_BETAS,
    DEFAULT_EPS,
)
from reference.model import GPT, GPTConfig
from reference.outer import OuterState
from tests.trainer.nodes import DEV_KEYS, RUN_ID
from trainer.network.membership import MembershipConfig
from trainer.round.attest import Attester
from trainer.round.diloco import DiLoCo, RoundSettings
from trainer.round.node import NodeRunner, NodeSettings
from trainer.round.runconfig import RunConfig, StaticConfig
from trainer.round.strategy import Strategy

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)
H = 3


@dataclass
class FirstSteps:
    """The AdamW state each round's first inner step starts from: its step count and the size of
    its first moments (0 for a fresh AdamW, which has no state yet)."""

    round: int = 0
    seen: dict[int, tuple[int, float]] = field(default_factory=dict)

    def hook(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.round in self.seen:
            return
        states = [opt.state[p] for g in opt.param_groups for p in g["params"]]
        steps = [int(s["step"]) for s in states if "step" in s]
        moments = sum(float(s["exp_avg"].abs().sum()) for s in states if "exp_avg" in s)
        self.seen[self.round] = (max(steps, default=0), moments)

    @contextmanager
    def watching(self) -> Iterator[None]:
        handle = register_optimizer_step_pre_hook(self.hook)
        try:
            yield
        finally:
            handle.remove()


class Watched(Strategy):
    """Honest; tells the watcher which round the next inner steps belong to."""

    def __init__(self, watch: FirstSteps) -> None:
        self.watch = watch

    def settings(self, r: int, settings: RoundSettings) -> RoundSettings:
        self.watch.round = r
        return settings


def _node(corpus_dir: Path, port: int, tmp: Path, config: RunConfig, watch: FirstSteps,
          rounds: int) -> NodeRunner:  # fmt: skip
    key = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[2][2:]))
    domain = Eip712Domain(chain_id=31337, verifying_contract=key.address)
    settings = NodeSettings(
        run_id=RUN_ID,
        model=SMALL,
        rendezvous_port=port,
        membership=MembershipConfig(min_nodes=1, join_window_s=0.0),
        data_path=str(corpus_dir),
        checkpoint_dir=tmp,
        max_rounds=rounds,
        eval_rows=0,
    )
    return NodeRunner(settings, Attester(key, domain, RUN_ID, None), StaticConfig(config),
                      strategy=Watched(watch))  # fmt: skip


def test_a_node_carries_its_inner_adamw_across_rounds_and_starts_fresh_on_rejoin(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    config = RunConfig.make(inner_steps=H, batch_size=4, keep_inner_state=True)
    watch = FirstSteps()
    node = _node(corpus_dir, store_port, tmp_path, config, watch, rounds=3)
    with watch.watching():
        reports = node.run()
    assert [r.round for r in reports] == [1, 2, 3]
    assert watch.seen[1] == (0, 0.0), "the node's first round starts a fresh AdamW"
    steps, moments = watch.seen[2]
    assert steps == H and moments > 0, "round 2's first step starts from round 1's moments"
    assert watch.seen[3][0] == 2 * H

    # A rejoin (or a checkpoint load, or a resync) adopts a state: the moments start fresh.
    assert node.diloco is not None
    node.adopt(CheckpointDir(tmp_path).load(3))
    watch.round = 4
    with watch.watching():
        node.train_local(4, config)
    assert watch.seen[4] == (0, 0.0)


def test_the_fresh_path_starts_every_round_from_no_state(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    config = RunConfig.make(inner_steps=H, batch_size=4, keep_inner_state=False)
    watch = FirstSteps()
    with watch.watching():
        _node(corpus_dir, store_port, tmp_path, config, watch, rounds=2).run()
    assert watch.seen == {1: (0, 0.0), 2: (0, 0.0)}


def test_a_change_of_the_inner_config_starts_the_carried_state_fresh() -> None:
    model = GPT(SMALL, seed=1)
    diloco = DiLoCo(model, OuterState.from_model(model))
    rows = torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=torch.Generator().manual_seed(2))
    carried = RunConfig.make(inner_steps=2, batch_size=4, keep_inner_state=True).settings
    diloco.train_local(rows, carried)
    first = diloco.inner
    diloco.train_local(rows, carried)
    assert diloco.inner is first and first is not None and first.global_step == 4
    relr = replace(carried, inner=replace(carried.inner, lr=carried.inner.lr / 2))
    diloco.train_local(rows, relr)
    assert diloco.inner is not first and diloco.inner is not None
    assert diloco.inner.global_step == 2, "a governed lr change: the state starts fresh"


def test_each_mode_runs_its_own_protocol_constants() -> None:
    assert CARRY_STATE, (
        "the node keeps its AdamW across rounds; the audit reads the committed state"
    )
    assert RunConfig.make().settings.keep_inner_state is CARRY_STATE
    fresh = RunConfig.make(keep_inner_state=False).settings.inner
    carried = RunConfig.make(keep_inner_state=True).settings.inner
    assert (fresh.betas, fresh.eps, fresh.warmup_steps) == (DEFAULT_BETAS, DEFAULT_EPS, 0)
    assert (carried.betas, carried.eps, carried.warmup_steps) == (
        CARRIED_BETAS,
        CARRIED_EPS,
        CARRIED_WARMUP_STEPS,
    )
    # the mode is the node's own (left out of the governed hash) while CARRY_STATE is a constant
    assert "keep_inner_state" not in RunConfig.make().governed()["settings"]
