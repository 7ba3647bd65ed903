"""The bisection of a failed segment (reference.bisect): a cheat at each position of a segment is
named exactly, the first of two cheats is the one named, and an honest node on other threads
holds at the step the bisection ends on."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ledger.core.config import ONE_STEP_TOLERANCE, SEGMENT_TOLERANCE
from protocol.errors import ConfigError
from reference.bisect import bisect_segment, narrow, next_probe, schedule_step, step_config
from reference.data import ShardSpec
from reference.inner import InnerConfig
from reference.model import GPT, GPTConfig
from reference.segment import STEP, State, fresh_state, replay_segment

K, BATCH, LR = 8, 4, 3e-3
CFG = GPTConfig.preset("tiny")
INNER = InnerConfig(steps=K, lr=LR, batch_size=BATCH, schedule_steps=20)


@pytest.fixture(scope="module")
def rows() -> torch.Tensor:
    from ledger.judge.usefulness import corpus_of

    spec = ShardSpec.for_node(bytes(32), 1, "0x" + "2" * 40, K * BATCH * CFG.seq_len, (10_000,))
    return corpus_of(None).shard_rows(spec, CFG.seq_len)


@pytest.fixture(scope="module")
def start() -> State:
    torch.manual_seed(11)
    return fresh_state({n: p.detach().clone() for n, p in GPT(CFG).named_parameters()})


def trajectory(start: State, rows: torch.Tensor, cheats: dict[int, str]) -> list[State]:
    """A node's state after every step on 2 threads; at a step in ``cheats`` it skips the step
    (claiming it) or runs it at lr x 0.9, then trains on honestly from what it claimed."""
    states = [start]
    for i in range(K):
        s = states[-1]
        cfg = step_config(INNER, schedule_step(s))
        if cheats.get(i) == "skip":
            states.append({**s, STEP: s[STEP] + 1})
            continue
        if cheats.get(i) == "lr":
            cfg = dataclasses.replace(cfg, lr=cfg.lr * 0.9)
        batch = rows[i * BATCH : (i + 1) * BATCH]
        states.append(replay_segment(s, batch, cfg, CFG, threads=2))
    return states


def run(states: list[State], rows: torch.Tensor, seg_tol: float = SEGMENT_TOLERANCE):  # type: ignore[no-untyped-def]
    asked: list[int] = []

    def claimed(i: int) -> State:
        asked.append(i)
        return states[i]

    result = bisect_segment(claimed, rows, (0, K), INNER, CFG, segment_tolerance=seg_tol,
                            one_step_tolerance=ONE_STEP_TOLERANCE, threads=1)  # fmt: skip
    return result, asked


@pytest.mark.parametrize(
    "position",
    [p if p in (0, 5, K - 1) else pytest.param(p, marks=pytest.mark.slow) for p in range(K)],
)
def test_a_skipped_step_at_each_position_is_named(
    start: State, rows: torch.Tensor, position: int
) -> None:
    result, asked = run(trajectory(start, rows, {position: "skip"}), rows)
    assert result.step == position
    assert not result.holds
    assert result.check.error.weights > 0.5  # the claimed state did not move: about 1 step's work
    assert len(result.probes) == 3  # log2(8) states asked for inside the segment
    assert len(set(asked)) <= 2 + 3  # and the two ends, already committed


@pytest.mark.parametrize(
    "position",
    [3, pytest.param(0, marks=pytest.mark.slow), pytest.param(7, marks=pytest.mark.slow)],
)
def test_a_step_at_a_wrong_lr_is_named(start: State, rows: torch.Tensor, position: int) -> None:
    result, _ = run(trajectory(start, rows, {position: "lr"}), rows)
    assert result.step == position
    assert result.check.error.value > 10 * ONE_STEP_TOLERANCE


def test_the_first_of_two_cheats_is_named(start: State, rows: torch.Tensor) -> None:
    result, _ = run(trajectory(start, rows, {2: "skip", 5: "lr"}), rows)
    assert result.step == 2


def test_an_honest_node_on_other_threads_holds(start: State, rows: torch.Tensor) -> None:
    # a segment tolerance of 0 sends every probe left: the bisection ends on step 0, which an
    # honest node's state explains within the one-step tolerance
    result, _ = run(trajectory(start, rows, {}), rows, seg_tol=0.0)
    assert result.step == 0
    assert result.holds
    assert result.check.error.value < ONE_STEP_TOLERANCE / 100
    # the lr named is the schedule's at that step, not the base lr
    assert result.lr == pytest.approx(LR)


def test_the_state_machine_refuses_bad_intervals() -> None:
    assert next_probe(0, 8) == 4
    assert next_probe(3, 4) is None
    assert narrow(0, 8, 4, True) == (4, 8)
    assert narrow(0, 8, 4, False) == (0, 4)
    with pytest.raises(ConfigError, match="lo < hi"):
        next_probe(4, 4)
    with pytest.raises(ConfigError, match="not inside"):
        narrow(0, 8, 8, True)
