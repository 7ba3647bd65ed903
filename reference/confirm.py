"""A one-step verdict that differs, confirmed on the top of the model: the fraud proof an
auditor checks in a fraction of one inner step.

A verdict (reference.bisect) that *differs* says: the node's claimed state after step ``s`` is
not what one AdamW step from its own state before it gives. Every parameter's update depends on
the whole forward pass, but the gradients of the parameters nearest the loss, the last block
and the final norm (:func:`top_names`), need only the backward through them. So
:func:`confirm_step` runs the forward, the backward through the top alone, and the top's AdamW
step, and compares the top's weights and moments with what the node claimed: at cpu10m about a
third of a step (the forward, a sixth of the backward, AdamW over a sixth of the parameters).

The top cannot know one number of the step: gradient clipping scales every gradient by
``c = min(1, clip / (|g| + 1e-6))`` where ``|g|`` is the norm over *all* parameters. The check
does not guess it. It fits ``c`` to the node's claimed first moment on the top (AdamW's
``m' = b1 m + (1 - b1) c g``: least squares over the top's values, exact for an honest node up
to rounding), keeps it within what the top allows (``0 <= c <= min(1, clip / (|g_top| + 1e-6))``,
since ``|g| >= |g_top|``), and replays the top's step with its gradients scaled by it.

- The top differs by more than :data:`CONFIRM_FACTOR` times the verdict's tolerance
  (:func:`reference.segment.segment_error`, on the top's own tensors): the verdict is
  *confirmed*. No clipping the rest of the model could have caused explains the top's claimed
  state: a skipped step (its first moment not moved along the gradient), another lr or batch, a
  step scaled beyond what clipping allows.
- Within: *inconclusive* (an honest step, or a lie confined below the top, or the first step of
  a fresh AdamW skipped, whose zero moments fit ``c = 0``); the caller replays the whole step
  (:func:`reference.bisect.check_step`).

An honest step's top replays to rounding (its ``c`` within 1e-4 of torch's), far under the
threshold, so the top never confirms a verdict against an honest node: a false verdict costs
the auditor the top and then the whole step to refute, a true one only the top (tests:
tests/trainer/test_confirm.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from protocol.errors import ConfigError
from reference.bisect import as_segment_state
from reference.inner import InnerConfig, torch_threads
from reference.model import GPT, GPTConfig
from reference.segment import STEP, SegmentError, moved_state, segment_error

CONFIRM_FACTOR = 10.0
"""The top confirms a verdict when its error exceeds this many times the one-step tolerance:
an honest step's top is about 1e-7 away, the smallest cheat measured (the lr x 0.9) 0.1."""

CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s: clip / (total_norm + 1e-6)


def top_names(model_cfg: GPTConfig) -> list[str]:
    """The parameters whose gradients need only the backward through the top: the last block's
    and the final norm's (the embedding is tied to the head, so its gradient needs all of it)."""
    return _top_of(_shape_model(model_cfg))


def _top_of(model: GPT) -> list[str]:
    last = f"blocks.{model.cfg.n_layer - 1}."
    return [n for n, _ in model.named_parameters() if n.startswith((last, "ln_f."))]


def _shape_model(model_cfg: GPTConfig) -> GPT:
    """The model without storage (its parameters are the states' tensors, set next)."""
    with torch.device("meta"):
        return GPT(model_cfg, init=False)


@dataclass(frozen=True)
class TopCheck:
    """One step's top replayed (module docstring) and held to the node's claimed top."""

    error: SegmentError
    threshold: float
    clip: float
    """The clip coefficient the top's step was replayed with (1.0 when clipping is off)."""
    params: int
    """Parameters in the top."""

    @property
    def confirms(self) -> bool:
        return self.error.value > self.threshold


def _top_state(state: Mapping[str, Tensor], names: list[str]) -> dict[str, Tensor] | None:
    """The top's tensors of a segment state, or None when the state lacks one."""
    keys = [k for n in names for k in (f"weights/{n}", f"adam/{n}/exp_avg", f"adam/{n}/exp_avg_sq")]
    if any(k not in state for k in (*keys, STEP)):
        return None
    return {k: state[k] for k in (*keys, STEP)}


def confirm_step(
    before: Mapping[str, Tensor],
    after: Mapping[str, Tensor],
    batch: Tensor,
    cfg: InnerConfig,
    model_cfg: GPTConfig,
    *,
    tolerance: float,
    threads: int | None = None,
    move: tuple[Mapping[str, Tensor], Mapping[str, Tensor]] | None = None,
) -> TopCheck:
    """The top of one AdamW step (``cfg``: :func:`reference.bisect.step_config`'s, one step)
    replayed from ``before`` over ``batch`` and held to ``after``'s top; ``move`` as
    :func:`reference.bisect.check_step`'s (a ``before`` taken before AdamW's first step gets
    zero moments, as there); an ``after`` without the top's tensors differs."""
    if cfg.steps != 1:
        raise ConfigError(f"a one-step check runs one step, the config says {cfg.steps}")
    if batch.shape[0] < cfg.batch_size:
        raise ConfigError(f"the batch has {batch.shape[0]} rows, the step reads {cfg.batch_size}")
    threshold = CONFIRM_FACTOR * tolerance
    before = as_segment_state(before)
    model = _shape_model(model_cfg)
    names = _top_of(model)
    start = _top_state(before, names)
    if start is None:
        raise ConfigError("the state before the step lacks the top's weights or moments")
    claimed = _top_state(after, names)
    params = sum(int(start[f"weights/{n}"].numel()) for n in names)
    if claimed is None or any(claimed[k].shape != v.shape for k, v in start.items()):
        why = "the claimed state lacks the top's tensors or has them in other shapes"
        return TopCheck(SegmentError(math.inf, math.inf, math.inf, why), threshold, math.nan,
                        params)  # fmt: skip
    with torch_threads(threads):
        replayed, clip = _replay_top(model, names, before, (start, claimed),
                                     batch[: cfg.batch_size], cfg)  # fmt: skip
    if move is not None:
        origin, base = move
        top_base = {n: base[n] for n in names if n in base}
        replayed = moved_state(replayed, origin, top_base)
        start = moved_state(start, origin, top_base)
    return TopCheck(segment_error(claimed, replayed, start), threshold, clip, params)


def _replay_top(  # noqa: PLR0917 - the step's inputs
    model: GPT,
    names: list[str],
    before: Mapping[str, Tensor],
    top: tuple[dict[str, Tensor], dict[str, Tensor]],
    rows: Tensor,
    cfg: InnerConfig,
) -> tuple[dict[str, Tensor], float]:
    """The top's state after the step, and the clip coefficient it was replayed with (``top``:
    the top's tensors before the step and as claimed after it). The model's parameters are
    ``before``'s tensors themselves (no copy; read only, they take no gradient) but the top's,
    which are copies the step moves."""
    start, claimed = top
    in_top = set(names)
    for name, p in list(model.named_parameters()):
        t = before.get(f"weights/{name}")
        if t is None or t.shape != p.shape:
            raise ConfigError(f"the state before the step has no weights/{name} of shape "
                              f"{tuple(p.shape)}")  # fmt: skip
        owner, _, leaf = name.rpartition(".")
        mine = name in in_top
        value = t.detach().float().clone() if mine else t.detach().float()  # fp32: no copy
        model.get_submodule(owner).register_parameter(leaf, torch.nn.Parameter(value, mine))
    params = [(n, p) for n, p in model.named_parameters() if n in in_top]
    model.train()
    _, loss = model(rows[:, :-1], rows[:, 1:])
    assert loss is not None
    loss.backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in params]
    clip = _fit_clip(params, grads, start, claimed, cfg)
    step = float(start[STEP])
    opt = torch.optim.AdamW([p for _, p in params], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                            weight_decay=cfg.weight_decay)  # fmt: skip
    for (n, p), g in zip(params, grads, strict=True):
        p.grad = g.mul_(clip)
        opt.state[p] = {
            "step": torch.tensor(step),
            "exp_avg": start[f"adam/{n}/exp_avg"].float().clone(),
            "exp_avg_sq": start[f"adam/{n}/exp_avg_sq"].float().clone(),
        }
    opt.step()
    out: dict[str, Tensor] = {STEP: torch.tensor(step + 1)}
    for n, p in params:
        out[f"weights/{n}"] = p.detach()
        out[f"adam/{n}/exp_avg"] = opt.state[p]["exp_avg"]
        out[f"adam/{n}/exp_avg_sq"] = opt.state[p]["exp_avg_sq"]
    return out, clip


def _fit_clip(
    top: list[tuple[str, torch.nn.Parameter]],
    grads: list[Tensor],
    start: Mapping[str, Tensor],
    claimed: Mapping[str, Tensor],
    cfg: InnerConfig,
) -> float:
    """The clip coefficient that best explains the claimed first moment on the top (least
    squares, float64), within ``[0, min(1, clip / (|g_top| + 1e-6))]``; 1.0 without clipping."""
    if cfg.grad_clip <= 0:
        return 1.0
    b1 = cfg.betas[0]
    dot = norm2 = 0.0
    for (n, _), g in zip(top, grads, strict=True):
        g64 = g.detach().double().reshape(-1)
        moved = claimed[f"adam/{n}/exp_avg"].double().reshape(-1)
        moved = moved - b1 * start[f"adam/{n}/exp_avg"].double().reshape(-1)
        dot += float(torch.dot(moved, g64))
        norm2 += float(torch.dot(g64, g64))
    bound = min(1.0, cfg.grad_clip / (math.sqrt(norm2) + CLIP_EPS))
    if norm2 == 0 or not math.isfinite(dot):
        return bound
    return min(max(dot / ((1 - b1) * norm2), 0.0), bound)
