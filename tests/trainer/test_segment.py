"""The segment replay (reference.segment): an honest node's segment reproduced within the
tolerance on 1 and 2 threads, and the cheats a segment holds caught."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from ledger.core.config import SEGMENT_TOLERANCE
from protocol.errors import ConfigError
from reference.data import ShardSpec
from reference.inner import InnerConfig, InnerTrainer, one_thread
from reference.model import GPT, GPTConfig
from reference.segment import (
    STEP,
    State,
    capture_state,
    fresh_state,
    load_state,
    replay_segment,
    segment_error,
    segment_rows,
)

H, K, BATCH, LR = 10, 5, 4, 3e-3
CFG = GPTConfig.preset("tiny")


@pytest.fixture(scope="module")
def rows() -> torch.Tensor:
    from ledger.judge.usefulness import corpus_of

    spec = ShardSpec.for_node(bytes(32), 1, "0x" + "1" * 40, H * BATCH * CFG.seq_len, (10_000,))
    return corpus_of(None).shard_rows(spec, CFG.seq_len)


@pytest.fixture(scope="module")
def base() -> dict[str, torch.Tensor]:
    torch.manual_seed(7)
    return {n: p.detach().clone() for n, p in GPT(CFG).named_parameters()}


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def states(base: dict[str, torch.Tensor], rows: torch.Tensor) -> list[State]:
    """An honest node on two threads (torch's default here): its boundaries every K steps."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return _node_round(base, rows)
    finally:
        torch.set_num_threads(before)


def _node_round(base: dict[str, torch.Tensor], rows: torch.Tensor) -> list[State]:
    """An honest node's boundaries: InnerTrainer's own loop, k steps at a time."""
    model = GPT(CFG)
    model.load_state_dict(base, strict=False)
    trainer = InnerTrainer(model, InnerConfig(steps=K, lr=LR, batch_size=BATCH))
    states = [fresh_state(base)]
    for j in range(H // K):
        trainer.train(segment_rows(rows, j * K, K, BATCH))
        states.append(capture_state(model, trainer.optimizer()))
    return states


def _replay(states: list[State], rows: torch.Tensor, j: int, threads: int) -> State:
    seg_cfg = InnerConfig(steps=K, lr=LR, batch_size=BATCH)
    return replay_segment(states[j], segment_rows(rows, j * K, K, BATCH), seg_cfg, CFG,
                          first_step=j * K, threads=threads)  # fmt: skip


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("ledger_threads", [1, 2])
def test_honest_segments_pass_on_one_and_two_threads(
    states: list[State], rows: torch.Tensor, ledger_threads: int
) -> None:
    for j in range(H // K):
        err = segment_error(states[j + 1], _replay(states, rows, j, ledger_threads), states[j])
        assert err.value <= SEGMENT_TOLERANCE, (j, err)
    assert torch.get_num_threads() == 2  # the replay restored the process's threads


def test_segments_chain_to_the_fresh_round(
    base: dict[str, torch.Tensor], rows: torch.Tensor
) -> None:
    """Segments from a fresh state (zero moments, step 0) are the node's fresh-AdamW round."""
    model = GPT(CFG)
    model.load_state_dict(base, strict=False)
    InnerTrainer(model, InnerConfig(steps=H, lr=LR, batch_size=BATCH), keep_state=False).train(rows)
    state = fresh_state(base)
    for j in range(H // K):
        state = replay_segment(state, segment_rows(rows, j * K, K, BATCH),
                               InnerConfig(steps=K, lr=LR, batch_size=BATCH), CFG,
                               first_step=j * K)  # fmt: skip
    assert float(state[STEP]) == H
    for n, p in model.named_parameters():
        assert torch.equal(state[f"weights/{n}"], p.detach()), n


@pytest.mark.usefixtures("two_threads")
def test_a_skipped_step_and_lying_moments_are_caught(
    states: list[State], rows: torch.Tensor
) -> None:
    start = states[1]
    model = GPT(CFG)
    trainer = InnerTrainer(model, InnerConfig(steps=K - 1, lr=LR, batch_size=BATCH))
    load_state(model, trainer.optimizer(), start)
    seg = segment_rows(rows, K, K, BATCH)
    trainer.train(torch.cat([seg[:BATCH], seg[2 * BATCH :]]))  # step 1 of the segment skipped
    skipped = capture_state(model, trainer.optimizer())
    skipped[STEP] = start[STEP] + K  # it claims the step it did not take
    replayed = _replay(states, rows, 1, 1)
    assert segment_error(skipped, replayed, start).weights > 10 * SEGMENT_TOLERANCE

    lying = dict(states[2])  # right weights, moments that would slow the next segment
    lying.update({k: v * 4 for k, v in lying.items() if k.endswith("exp_avg_sq")})
    assert segment_error(lying, replayed, start).value > 10 * SEGMENT_TOLERANCE
    wrong_step = {**states[2], STEP: states[2][STEP] - 1}
    assert segment_error(wrong_step, replayed, start).value == float("inf")


def test_a_state_that_does_not_fit_the_model_is_refused(base: dict[str, torch.Tensor]) -> None:
    model = GPT(CFG)
    opt = InnerTrainer(model, InnerConfig(steps=1, lr=LR)).optimizer()
    state = fresh_state(base)
    del state[next(k for k in state if k.endswith("exp_avg_sq"))]
    with pytest.raises(ConfigError, match="missing"):
        load_state(model, opt, state)
    state = {**fresh_state(base), STEP: torch.tensor(1.5)}
    with pytest.raises(ConfigError, match="whole number"):
        load_state(model, opt, state)
    with pytest.raises(ConfigError, match="need"):
        segment_rows(torch.zeros(8, CFG.seq_len + 1, dtype=torch.long), 1, 2, 4)


def test_a_replay_reuses_its_model_without_carrying_anything_over(
    states: list[State], rows: torch.Tensor
) -> None:
    """The replay keeps one model per thread (reference.segment._replay_model): a replay after
    others (another segment, another shape) is bit for bit a replay on a freshly built model."""
    first = _replay(states, rows, 0, 1)
    _replay(states, rows, 1, 1)
    other = GPTConfig(n_layer=1, n_head=2, d_model=16, seq_len=CFG.seq_len)
    replay_segment(fresh_state(dict(GPT(other).named_parameters())), rows[:BATCH],
                   InnerConfig(steps=1, lr=LR, batch_size=BATCH), other, threads=1)  # fmt: skip
    again = _replay(states, rows, 0, 1)
    assert again.keys() == first.keys()
    assert all(torch.equal(again[k], first[k]) for k in first)
    model = GPT(CFG)
    trainer = InnerTrainer(model, InnerConfig(steps=K, lr=LR, batch_size=BATCH), keep_state=True)
    load_state(model, trainer.optimizer(), states[0])
    with one_thread():
        trainer.train(segment_rows(rows, 0, K, BATCH))
    fresh = capture_state(model, trainer.optimizer())
    assert all(torch.equal(fresh[k], first[k]) for k in first)


def test_segment_error_reads_any_float_dtype_exactly(states: list[State]) -> None:
    """A claimed state in bf16 or float64 is compared as stored (never rounded to float32
    first): the float64 reference error, to within the float32 rounding of each difference
    (6e-8 of it: reference.segment._rel)."""
    end, start = states[1], states[0]
    for dtype in (torch.bfloat16, torch.float64):
        claimed = {k: v.to(dtype) if k.startswith("weights/") else v for k, v in end.items()}
        keys = sorted(k for k in end if k.startswith("weights/"))
        by_key = torch.cat([claimed[k].double().reshape(-1) for k in keys])
        rep = torch.cat([end[k].double().reshape(-1) for k in keys])
        moved = rep - torch.cat([start[k].double().reshape(-1) for k in keys])
        expected = float((by_key - rep).norm()) / float(moved.norm())
        assert segment_error(claimed, end, start).weights == pytest.approx(expected, rel=1e-7)


def test_the_native_sums_read_as_torchs(
    states: list[State], monkeypatch: pytest.MonkeyPatch
) -> None:
    """segment_error on the native kernel (reference.codec.native.sq_diff) and on torch's
    float64 norms agree to the float64 sum's order (1e-12), on a real segment with a claimed
    state off by a little."""
    end, start = states[1], states[0]
    g = torch.Generator().manual_seed(3)
    claimed = {k: v + 1e-6 * torch.randn(v.shape, generator=g) if v.dim() else v
               for k, v in end.items()}  # fmt: skip
    got = {}
    for backend in ("native", "torch"):
        monkeypatch.setenv("COLOCO_CODEC", backend)
        got[backend] = segment_error(claimed, end, start)
    for part in ("weights", "exp_avg", "exp_avg_sq"):
        native, ref = getattr(got["native"], part), getattr(got["torch"], part)
        assert 0 < native == pytest.approx(ref, rel=1e-12), part


def test_the_native_sum_takes_each_difference_in_float32() -> None:
    """The kernel's difference is fp32's, as torch's ``a - b``: one that overflows fp32 is
    infinite (a float64 difference would not be), a NaN stays NaN, and a length that is no
    multiple of its 8 lanes sums every element."""
    from reference.codec import native

    if native.load() is None:
        pytest.skip("no C compiler: the native kernels are not built here")
    big = torch.tensor([3e38, 1.0, 2.0])
    assert native.sq_diff(big, -big) == float("inf")
    assert math.isnan(native.sq_diff(torch.tensor([float("nan"), 1.0]), None))
    for n in (1, 7, 8, 9, 1001):
        a, b = torch.randn(n), torch.randn(n)
        ref = float(((a - b).double() ** 2).sum())
        assert native.sq_diff(a, b) == pytest.approx(ref, rel=1e-12), n
        assert native.sq_diff(a, None) == pytest.approx(float((a.double() ** 2).sum()), rel=1e-12)
