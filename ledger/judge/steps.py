"""Cheap signals that a pseudo-gradient is the declared inner steps on the declared shard, from how
a fresh AdamW moves weights (the inner optimizer of every replayable round, ``reference.inner``).

Adam normalises each coordinate's step: the first step of a fresh AdamW moves every coordinate by
exactly ``lr`` in the direction of the sign of the gradient on the first batch, and no step moves
one by much more than ``lr`` (measured: at most 1.075 ``lr`` per step on the red team's real
nodes). Two consequences a node cannot fake without doing the work:

- **The step-count relation** (:func:`linf_ratio`): the coordinates whose gradient keeps its sign
  move about ``lr`` every step, so the largest coordinate of an honest update is about
  ``lr x innerSteps``: measured 0.987-1.075 ``lr x H`` over 146 honest node-rounds, within
  0.958-1.048 of its round's median. Half the steps scaled up to an honest norm reach only
  0.69-0.82 of the median (a 1.7x scale of ``lr x H / 2``); noise 1.8x, a noisy copy 1.4x.
  Simulated from the 48 committed bases of two runs (4 honest updates each, one of each cheat):
  honest 0.972-1.039, half the steps scaled 0.607-0.867.
- **The first batch's signature** (:class:`FirstStepProbe`): a coordinate that moved at least
  ``SATURATION x lr x H`` (0.85) moved the same way at (nearly) every step, the first included, so
  its sign is the sign of the gradient of the declared shard's first batch at the committed base.
  Measured over 292 honest node-rounds (two runs): at most 1 of such coordinates (290-31,000 of
  them per update) disagrees; training on other data: 43 of 3,921 and 286 of 2,989 (the rest
  agree as every batch's gradient does), a copy 724-1,100, a sybil's 124-164. Simulated from
  the 48 bases: honest at most 1 disagreeing (192 updates, none suspicious), other data 1.6% or
  more (48 of 48 suspicious).

With AdamW's eps 1e-4 (``reference.inner.DEFAULT_EPS``, was 1e-8) a coordinate with a tiny gradient
moves less than ``lr``, the largest ones still about ``lr``. Re-measured at the red team's
settings (H 8, lr 1e-3, batch 4; 24 honest updates from 6 bases, genesis and a 200-step warm
model, seeds 0-2): honest 0.959-1.013 of the median (1e-8: 0.991-1.009), half the steps scaled
up 0.646-0.756, honest at most 1 disagreeing, other data suspicious on 6 of 6 bases; but on the
warm bases only 47-167 coordinates saturate (1e-8: 2,420-8,847), so the probe has less to count
on a trained model (tests/redteam/test_inner_steps.py checks one: honest 88 of 88 agree, other
data 38 of 78 disagree).

On a trained base (bases 30-3,000 steps past genesis) fewer than :data:`MOST_MOVED` coordinates
saturate and two red-team runs' other-data nodes escaped with 4 of 47 and 2 of 34 disagreeing;
there the cut drops to the :data:`MOST_MOVED`-th largest coordinate, no lower than :data:`FLOOR`
(:func:`cut_of`): honest at most 1 of 412-500 disagreeing, other data 74-256 (36 of each).

Neither rejects anything: each only makes a node-round suspicious, and the replay audit decides.
The probe costs one forward and backward pass of one batch per node (a replay runs ``H`` of them).
Measured ranges and thresholds: docs/ledger.md, "Red team and replay tolerance".
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch

Tensors = Mapping[str, torch.Tensor]

SATURATION = 0.85  # a coordinate that moved >= this x lr x H moved the same way every step
# fewer than MOST_MOVED saturated (a trained base): the cut drops to the MOST_MOVED-th largest
# coordinate, never under FLOOR x lr x H (honest at 0.75: at most 1 of 418-1,105 disagreeing on
# trained bases; at genesis, where 5,000-6,000 saturate, 58-246 of 7,000: hence not lower always)
MOST_MOVED = 500
FLOOR = 0.75
# honest: at most 1 of 88-31,000 measured (numerics may flip a tiny grad); other data on a trained
# base as few as 4 of 47 (a red-team run that escaped to the 10% sample when this was 5)
MIN_DISAGREEING = 3
DISAGREEING_SHARE = 0.002  # and at least this share; other data: 1.1%-9.6% measured
LINF_BAND = (0.92, 1.12)  # x the round median largest coordinate; honest 0.958-1.048


def cut_of(pseudo_gradient: Tensors, lr: float, steps: int) -> float:
    """The probe's cut in units of ``lr x steps``: :data:`SATURATION`, or the
    :data:`MOST_MOVED`-th largest coordinate when fewer reach it, no lower than :data:`FLOOR`."""
    unit = lr * steps
    if unit <= 0:
        return SATURATION
    above = [t.detach().float().abs().reshape(-1) for t in pseudo_gradient.values()]
    candidates = torch.cat([a[a >= FLOOR * unit] for a in above]) if above else torch.empty(0)
    if int((candidates >= SATURATION * unit).sum()) >= MOST_MOVED:
        return SATURATION
    if candidates.numel() <= MOST_MOVED:
        return FLOOR
    kth = float(candidates.topk(MOST_MOVED).values[-1]) / unit
    return min(SATURATION, max(FLOOR, kth))


def linf(tensors: Tensors) -> float:
    """The largest absolute coordinate of a pseudo-gradient."""
    return max((float(t.detach().abs().max()) for t in tensors.values() if t.numel()), default=0.0)


def linf_ratio(value: float, lr: float, steps: int) -> float:
    """``value`` in units of ``lr x steps`` (about 1 for an honest update of a fresh AdamW)."""
    return value / (lr * steps) if lr > 0 and steps > 0 else float("inf")


@dataclass(frozen=True)
class Agreement:
    saturated: int  # coordinates that moved >= cut x lr x H
    agreeing: int  # of those, how many have the first batch's gradient sign
    cut: float = SATURATION  # x lr x H: SATURATION, or lower on a trained base (see :func:`cut_of`)

    @property
    def disagreeing(self) -> int:
        return self.saturated - self.agreeing

    @property
    def share(self) -> float:
        return self.agreeing / self.saturated if self.saturated else 1.0

    @property
    def suspicious(self) -> bool:
        return self.disagreeing >= max(MIN_DISAGREEING, DISAGREEING_SHARE * self.saturated)


class FirstStepProbe:
    """The committed base loaded once per round; :meth:`agreement` per node."""

    def __init__(self, base: Tensors, preset: str) -> None:
        from reference.checkpoint import load_weights_into
        from reference.model import GPT, GPTConfig

        start = time.process_time()
        self.config = GPTConfig.preset(preset)
        self.model = GPT(self.config)
        load_weights_into(self.model, {n: t.float() for n, t in base.items()})
        self.cpu_seconds = time.process_time() - start

    def agreement(self, pseudo_gradient: Tensors, first_batch: torch.Tensor,
                  lr: float, steps: int) -> Agreement:  # fmt: skip
        """Sign agreement of the saturated coordinates with the gradient of ``first_batch``
        (int64 ``[batch, seq_len + 1]``, the first rows of the node's declared shard)."""
        from reference.inner import one_thread

        start = time.process_time()
        try:
            with one_thread():
                return self._agreement(pseudo_gradient, first_batch, lr, steps)
        finally:
            self.cpu_seconds += time.process_time() - start

    def _agreement(self, pseudo_gradient: Tensors, first_batch: torch.Tensor,
                   lr: float, steps: int) -> Agreement:  # fmt: skip
        model = self.model
        model.train()
        model.zero_grad(set_to_none=True)
        _, loss = model(first_batch[:, :-1], first_batch[:, 1:])
        assert loss is not None
        loss.backward()
        pairs = {
            name: (pseudo_gradient[name].detach().float(), p.grad)
            for name, p in model.named_parameters()
            if name in pseudo_gradient
            and p.grad is not None
            and pseudo_gradient[name].shape == p.shape
        }
        ratio = cut_of({name: pg for name, (pg, _) in pairs.items()}, lr, steps)
        cut = ratio * lr * steps
        saturated = agreeing = 0
        for pg, grad in pairs.values():
            mask = pg.abs() >= cut
            n = int(mask.sum())
            if n:
                saturated += n
                same = torch.sign(pg[mask]) == torch.sign(grad[mask])
                agreeing += int(same.sum())
        model.zero_grad(set_to_none=True)
        return Agreement(saturated, agreeing, ratio)
