"""One-step verdicts: a failed segment bisected down to the first inner step the node's own
states cannot explain.

A segment of a round (steps ``lo .. hi - 1``, from the node's committed state after ``lo`` steps
to its committed state after ``hi``) failed its audit (reference.segment). The ledger then asks
the node for its claimed states *inside* the segment (the node recomputes them from its kept
boundary: trainer.round.boundaries) and narrows the interval:

- invariant: the node's state at ``lo`` is accepted, and the replay from it over ``hi - lo``
  steps differs from the node's state at ``hi``;
- probe ``mid``: replay ``mid - lo`` steps from the node's state at ``lo`` and compare with the
  node's claimed state at ``mid`` (:func:`reference.segment.segment_error`); within the tolerance
  the step lies right (``lo = mid``), else left (``hi = mid``);
- at ``hi = lo + 1`` one step is left: its replay from the node's *own* state at ``lo`` against
  the node's own state at ``lo + 1`` is the verdict (:func:`check_step`, the one-step
  tolerance). The ledger asks for ``log2(k)`` states and replays about ``k`` steps; anyone can
  re-check the verdict in one inner step (``coloco audit``), and a verdict that differs in a
  fraction of one (reference.confirm: the step's top).

Because every left move keeps the leftmost disagreement inside ``[lo, hi]`` and a cheat's effect
does not vanish within a segment, the step named is the first one that differs (tests: a cheat
at each position of a segment, two cheats). A last step that replays within the one-step
tolerance ``holds``: the segment's failure was not one step's lie (no step is named).

:func:`next_probe` and :func:`narrow` are the bisection as a state machine over ``(lo, hi)``
(what ledger.judge.bisect stores between the node's answers); :func:`bisect_segment` runs it
against an oracle of the node's states in one go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch import Tensor

from protocol.errors import ConfigError
from reference.inner import InnerConfig, lr_at
from reference.model import GPTConfig
from reference.segment import (
    STEP,
    SegmentError,
    State,
    fresh_state,
    moved_state,
    replay_segment,
    segment_error,
)

Claimed = Callable[[int], Mapping[str, Tensor]]
"""The node's claimed state after ``i`` inner steps of the round (an oracle: the ledger's is a
request the node answers)."""


def schedule_step(state: Mapping[str, Tensor]) -> int:
    """The lr schedule's step a replay from ``state`` starts at: AdamW's step count (as
    ledger.judge.replay.audit_segment), 0 for a state AdamW has not stepped."""
    return int(float(state[STEP])) if STEP in state else 0


def as_segment_state(state: Mapping[str, Tensor]) -> State:
    """A node's state in reference.segment's format: a boundary taken before AdamW's first step
    (reference.trace.boundary_state: weights only) gets the zero moments and step 0 a fresh
    AdamW starts from; ``residual/`` tensors are not the inner steps' (dropped)."""
    out = {k: v for k, v in state.items() if not k.startswith("residual/")}
    if STEP in out:
        return out
    weights = {k.removeprefix("weights/"): v for k, v in out.items() if k.startswith("weights/")}
    return {**fresh_state(weights), **out}


def step_config(cfg: InnerConfig, step: int, steps: int = 1) -> InnerConfig:
    """``cfg`` for ``steps`` steps from schedule step ``step`` at a constant lr: the schedule's
    lr at ``step`` (exact for one step; the evidence names that lr)."""
    if steps == 1:
        return dataclasses.replace(
            cfg, steps=1, lr=lr_at(cfg, step), warmup_steps=0, schedule_steps=0
        )
    return dataclasses.replace(cfg, steps=steps)


@dataclass(frozen=True)
class StepCheck:
    """One step replayed from the node's state and held to the node's next state."""

    error: SegmentError
    tolerance: float

    @property
    def holds(self) -> bool:
        return self.error.value <= self.tolerance


def check_step(
    before: Mapping[str, Tensor],
    after: Mapping[str, Tensor],
    batch: Tensor,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    *,
    tolerance: float,
    threads: int | None = None,
    move: tuple[Mapping[str, Tensor], Mapping[str, Tensor]] | None = None,
) -> StepCheck:
    """Replay one AdamW step over ``batch`` (``cfg.batch_size`` rows) at ``cfg.lr`` from
    ``before`` and compare with ``after`` (``cfg``: :func:`step_config`'s, one step).
    ``move``: (origin, base) when ``after`` is the first boundary of a round on the bounded
    overlap, whose weights the landing moved by ``base - origin``: the replayed step moves the
    same way (reference.segment.moved_state), and so does the start its error is scaled by."""
    if cfg.steps != 1:
        raise ConfigError(f"a one-step check runs one step, the config says {cfg.steps}")
    before = as_segment_state(before)
    replayed = replay_segment(before, batch, cfg, model_cfg, first_step=0, threads=threads)
    if move is not None:
        origin, base = move
        replayed, before = moved_state(replayed, origin, base), moved_state(before, origin, base)
    return StepCheck(segment_error(after, replayed, before), tolerance)


def next_probe(lo: int, hi: int) -> int | None:
    """The step count whose claimed state to ask for next, or None when one step is left."""
    if hi <= lo:
        raise ConfigError(f"a bisection needs lo < hi, got lo {lo}, hi {hi}")
    return None if hi - lo == 1 else (lo + hi) // 2


def narrow(lo: int, hi: int, mid: int, agrees: bool) -> tuple[int, int]:
    """The interval after probing ``mid``: right of it when the replay to ``mid`` agrees."""
    if not lo < mid < hi:
        raise ConfigError(f"probe {mid} is not inside ({lo}, {hi})")
    return (mid, hi) if agrees else (lo, mid)


def agrees_between(
    start: Mapping[str, Tensor],
    claimed: Mapping[str, Tensor],
    rows: Tensor,
    span: tuple[int, int],
    cfg: InnerConfig,
    *,
    model_cfg: GPTConfig,
    threads: int | None = None,
) -> SegmentError:
    """The error of the node's claimed state after ``mid`` steps against the replay of steps
    ``lo .. mid - 1`` from its state after ``lo`` (``span``: ``(lo, mid)``; ``rows``: the
    round's rows in reading order); compare :attr:`SegmentError.value` with a tolerance."""
    lo, mid = span
    start = as_segment_state(start)
    b = cfg.batch_size
    n = mid - lo
    if rows.shape[0] < mid * b:
        raise ConfigError(f"the rows end at step {rows.shape[0] // b}, the probe needs {mid}")
    step0 = schedule_step(start)
    replayed = replay_segment(start, rows[lo * b : mid * b], step_config(cfg, step0, n), model_cfg,
                              first_step=step0, threads=threads)  # fmt: skip
    return segment_error(claimed, replayed, start)


@dataclass(frozen=True)
class Bisection:
    """The outcome of :func:`bisect_segment`: the step judged (0-based in the round: from the
    node's state after ``step`` steps to its state after ``step + 1``), its check, the states
    and the number of the node's states asked for."""

    step: int
    check: StepCheck
    before: State
    after: State
    probes: tuple[int, ...]
    lr: float

    @property
    def holds(self) -> bool:
        return self.check.holds


def bisect_segment(
    claimed: Claimed,
    rows: Tensor,
    span: tuple[int, int],
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    *,
    segment_tolerance: float,
    one_step_tolerance: float,
    threads: int | None = None,
) -> Bisection:
    """Bisect the failed segment ``span = (lo, hi)`` (step counts) of a round whose rows are
    ``rows`` (in reading order, ``cfg.batch_size`` a step) to the first step whose one-step
    replay from the node's own state differs from the node's next state. ``claimed(i)`` is the
    node's state after ``i`` steps (asked for at ``lo``, ``hi`` and ``log2(hi - lo)`` points
    between)."""
    lo, hi = span
    states: dict[int, State] = {}

    def state(i: int) -> State:
        if i not in states:
            states[i] = dict(claimed(i))
        return states[i]

    probes: list[int] = []
    while (mid := next_probe(lo, hi)) is not None:
        probes.append(mid)
        err = agrees_between(state(lo), state(mid), rows, (lo, mid), cfg, model_cfg=model_cfg,
                             threads=threads)  # fmt: skip
        lo, hi = narrow(lo, hi, mid, err.value <= segment_tolerance)
    before, after = state(lo), state(hi)
    b = cfg.batch_size
    one = step_config(cfg, schedule_step(before))
    check = check_step(before, after, rows[lo * b : hi * b], one, model_cfg,
                       tolerance=one_step_tolerance, threads=threads)  # fmt: skip
    return Bisection(lo, check, before, after, tuple(probes), one.lr)
