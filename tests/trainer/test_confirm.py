"""A verdict that differs, confirmed on the step's top (reference.confirm): an honest step's top
replays to rounding whatever gradient clipping did to it (its clip coefficient fitted, never
guessed), the cheats are confirmed there, and what the top cannot see falls back to the whole
step (reference.verdict.recheck)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ledger.core.config import ONE_STEP_TOLERANCE
from reference.bisect import check_step, schedule_step, step_config
from reference.confirm import CONFIRM_FACTOR, TopCheck, confirm_step, top_names
from reference.inner import InnerConfig
from reference.model import GPT
from reference.segment import STEP, State, load_state, replay_segment
from reference.verdict import recheck
from tests.trainer.test_bisect import BATCH, CFG, INNER, rows, start
from tests.trainer.test_verdict import _verdict

__all__ = ["rows", "start"]  # the fixtures


def _honest(start: State, rows: torch.Tensor, inner: InnerConfig, steps: int) -> list[State]:
    states = [start]
    for i in range(steps):
        one = step_config(inner, schedule_step(states[-1]))
        states.append(replay_segment(states[-1], _batch(rows, i), one, CFG, threads=2))
    return states


def _batch(rows: torch.Tensor, i: int) -> torch.Tensor:
    return rows[i * BATCH : (i + 1) * BATCH]


def _true_clip(state: State, batch: torch.Tensor, clip: float) -> float:
    """What torch's clip_grad_norm_ scaled the whole step's gradients by."""
    model = GPT(CFG, init=False)
    load_state(model, torch.optim.AdamW(model.parameters()), state)
    _, loss = model(batch[:, :-1], batch[:, 1:])
    assert loss is not None
    loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
    return min(1.0, clip / (norm + 1e-6))


def _top(before: State, after: State, batch: torch.Tensor, inner: InnerConfig) -> TopCheck:
    one = step_config(inner, schedule_step(before))
    return confirm_step(before, after, batch, one, CFG, tolerance=ONE_STEP_TOLERANCE, threads=1)


@pytest.mark.parametrize("clip", [1.0, 0.05, 0.0])
def test_an_honest_step_s_top_replays_to_rounding_with_its_clip_fitted(
    start: State, rows: torch.Tensor, clip: float
) -> None:
    inner = dataclasses.replace(INNER, grad_clip=clip)
    states = _honest(start, rows, inner, 4)
    for i in range(4):
        top = _top(states[i], states[i + 1], _batch(rows, i), inner)
        assert not top.confirms and top.error.value < 1e-5, (i, top)
        true = _true_clip(states[i], _batch(rows, i), clip) if clip > 0 else 1.0
        assert top.clip == pytest.approx(true, rel=1e-4), (i, top.clip, true)
        if clip == 0.05:
            assert true < 0.5  # clipping is at work here: a guessed 1.0 would not replay
    assert top.params == sum(p.numel() for n, p in GPT(CFG).named_parameters()
                             if n in top_names(CFG))  # fmt: skip


def test_the_cheats_are_confirmed_on_the_top(start: State, rows: torch.Tensor) -> None:
    inner = dataclasses.replace(INNER, grad_clip=0.05)  # clipping on at every step
    states = _honest(start, rows, inner, 3)
    s, i = states[2], 2
    one = step_config(inner, schedule_step(s))
    cheats = {
        "skip": {**s, STEP: s[STEP] + 1},
        "lr x 0.9": replay_segment(
            s, _batch(rows, i), dataclasses.replace(one, lr=one.lr * 0.9), CFG, threads=2
        ),
        "another batch": replay_segment(s, _batch(rows, i + 1), one, CFG, threads=2),
        # not clipped: a gradient larger than any clipping of the whole model allows
        "unclipped": replay_segment(
            s, _batch(rows, i), dataclasses.replace(one, grad_clip=0.0), CFG, threads=2
        ),
    }
    name = "adam/blocks.1.mlp.up.weight/exp_avg"
    cheats["a moment of another shape"] = {**states[3], name: states[3][name][:1]}
    for kind, claimed in cheats.items():
        top = _top(s, claimed, _batch(rows, i), inner)
        assert top.confirms and top.error.value > CONFIRM_FACTOR * ONE_STEP_TOLERANCE, (kind, top)
        full = check_step(s, claimed, _batch(rows, i), one, CFG, tolerance=ONE_STEP_TOLERANCE)
        assert not full.holds, kind  # the whole step agrees


def test_a_lie_below_the_top_is_left_to_the_whole_step(start: State, rows: torch.Tensor) -> None:
    inner = dataclasses.replace(INNER, grad_clip=1.0)
    states = _honest(start, rows, inner, 3)
    s, honest = states[2], states[3]
    name = "weights/blocks.0.mlp.up.weight"
    lie = {**honest, name: honest[name] + 0.01 * (honest[name] - s[name]).abs().max()}
    top = _top(s, lie, _batch(rows, 2), inner)
    assert not top.confirms and top.error.value < 1e-5
    one = step_config(inner, schedule_step(s))
    assert not check_step(s, lie, _batch(rows, 2), one, CFG, tolerance=ONE_STEP_TOLERANCE).holds


def test_a_verdict_that_differs_is_rechecked_on_its_top_and_the_rest_on_the_step(
    start: State, rows: torch.Tensor
) -> None:
    ev, blobs = _verdict(start, rows, {5: "skip"})
    out = recheck(ev, blobs.__getitem__, threads=1)
    assert out.scope == "top" and not out.holds and out.to_json()["agrees_with_ledger"]
    assert out.to_json()["params_replayed"] == _top_count()
    whole = recheck(ev, blobs.__getitem__, threads=1, full=True)
    assert whole.scope == "step" and not whole.holds
    # the first step of a fresh AdamW skipped: its zero moments fit a clip of 0 on the top
    first, first_blobs = _verdict(start, rows, {0: "skip"})
    assert first.step == 0 and not first.holds
    out = recheck(first, first_blobs.__getitem__, threads=1)
    assert out.scope == "step" and not out.holds  # the whole step names it
    honest, honest_blobs = _verdict(start, rows, {}, seg_tol=0.0)
    assert recheck(honest, honest_blobs.__getitem__).scope == "step"  # holds: never the top
    # a ledger that calls an honest step a fraud: the top does not confirm it, the step refutes it
    false = dataclasses.replace(honest, holds=False)
    out = recheck(false, honest_blobs.__getitem__, threads=1)
    assert out.scope == "step" and out.holds and not out.to_json()["agrees_with_ledger"]


def _top_count() -> int:
    names = set(top_names(CFG))
    return sum(p.numel() for n, p in GPT(CFG).named_parameters() if n in names)
