"""Muon as DiLoCo's inner optimizer (a search, never the node: the protocol replays AdamW).

Muon (Keller Jordan's, "Muon: an optimizer for hidden layers"): for each 2-D weight matrix of
the transformer blocks, a momentum of the gradient (Nesterov, 0.95) is orthogonalised by five
quintic Newton-Schulz iterations (coefficients 3.4445, -4.7750, 2.0315) on the matrix divided by
its Frobenius norm, transposed when it has more rows than columns, so every singular value lands
near 1 (the quintic's band, about 0.7 to 1.2: it trades exactness for speed). The update is then
scaled by ``0.2 * sqrt(max(rows, cols))``, Moonshot's rule ("Muon is scalable for LLM
training"): an orthogonal ``rows x cols`` matrix has an RMS of ``1 / sqrt(max(rows, cols))``, so
the scaled update's RMS is 0.2, about AdamW's, and AdamW's learning rate carries over (Muon's lr
is searched around the AdamW inner lr instead of on a scale of its own). Decoupled weight decay
(``p *= 1 - lr * wd``) as AdamW's.

Everything else (the token and position embeddings, the tied output head, the LayerNorms' weights
and biases) runs AdamW with the inner config's betas, eps and weight decay, written out as
torch's single-tensor AdamW computes it on a CPU (a test checks the same bits).

:class:`MuonAdamW` is a :class:`torch.optim.AdamW` whose block matrices run Muon: the
:class:`InnerTrainer` sets every group's ``lr`` from its schedule (warmup included) and each Muon
group multiplies it by its ``lr_ratio`` (Muon's lr over AdamW's). :class:`MuonTrainer` is the
InnerTrainer that builds it; :func:`inner_trainer` picks the trainer by name (``adamw`` or
``muon``). fp32 throughout, deterministic on a CPU thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT

log = logging.getLogger("bench.muon")
NS_COEFFS = (3.4445, -4.7750, 2.0315)  # the quintic of Keller Jordan's Muon
NS_STEPS = 5
MUON_MOMENTUM = 0.95
RMS_MATCH = 0.2  # Moonshot: update RMS 0.2, about AdamW's
INNER_OPTS = ("adamw", "muon")


def newton_schulz(g: Tensor, steps: int = NS_STEPS) -> Tensor:
    """An approximate orthogonalisation of the 2-D ``g`` (``U V^T`` of its SVD, singular values
    pushed into about 0.7-1.2) by ``steps`` quintic Newton-Schulz iterations in fp32."""
    if g.ndim != 2:
        raise ValueError(f"Newton-Schulz needs a matrix, got shape {tuple(g.shape)}")
    a, b, c = NS_COEFFS
    x: Tensor = g.float() / (torch.linalg.matrix_norm(g.float()) + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:  # iterate on the wide side: the Gram matrix is the smaller one
        x = x.T
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_scale(shape: torch.Size) -> float:
    """Moonshot's factor: the orthogonalised update's RMS becomes :data:`RMS_MATCH`."""
    return RMS_MATCH * math.sqrt(max(shape[0], shape[1]))


def is_block_matrix(name: str, p: Tensor) -> bool:
    """Whether a parameter of :class:`reference.model.GPT` runs Muon: the 2-D weights of the
    transformer blocks (attention's qkv and proj, the MLP's up and down), not the embeddings
    (the output head is tied to the token embedding) nor the LayerNorms."""
    return p.ndim == 2 and name.startswith("blocks.")


@dataclass(frozen=True)
class MuonConfig:
    """Muon's part: ``lr_ratio`` is Muon's lr over the AdamW part's (1: the same lr)."""

    lr_ratio: float = 1.0
    momentum: float = MUON_MOMENTUM
    nesterov: bool = True
    ns_steps: int = NS_STEPS

    def __post_init__(self) -> None:
        if self.lr_ratio <= 0:
            raise ValueError(f"Muon's lr ratio must be positive, got {self.lr_ratio}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"Muon's momentum must be in [0, 1), got {self.momentum}")


class MuonAdamW(torch.optim.AdamW):
    """AdamW whose groups flagged ``muon`` run Muon instead (see the module doc). Build it with
    :meth:`for_model`; the AdamW groups are torch's AdamW (no amsgrad, no maximize)."""

    def __init__(self, groups: list[dict[str, object]], cfg: InnerConfig, muon: MuonConfig):
        super().__init__(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                         weight_decay=cfg.weight_decay, foreach=False)  # fmt: skip
        self.muon = muon

    @classmethod
    def for_model(cls, model: GPT, cfg: InnerConfig, muon: MuonConfig) -> MuonAdamW:
        named = list(model.named_parameters())
        matrices = [p for n, p in named if is_block_matrix(n, p)]
        rest = [p for n, p in named if not is_block_matrix(n, p)]
        groups: list[dict[str, object]] = [{"params": matrices, "muon": True},
                                           {"params": rest, "muon": False}]  # fmt: skip
        return cls([g for g in groups if g["params"]], cfg, muon)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group.get("muon", False):
                self._muon_group(group)
            else:
                self._adamw_group(group)
        return loss

    def _muon_group(self, group: dict[str, Any]) -> None:
        m = self.muon
        lr = float(group["lr"]) * m.lr_ratio
        wd = float(group["weight_decay"])
        for p in _params(group):
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf: Tensor = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - m.momentum)
            g = p.grad.lerp(buf, m.momentum) if m.nesterov else buf
            update = newton_schulz(g, m.ns_steps) * muon_scale(p.shape)
            if wd:
                p.mul_(1 - lr * wd)
            p.add_(update, alpha=-lr)

    def _adamw_group(self, group: dict[str, Any]) -> None:
        """torch's single-tensor AdamW, the same operations in the same order."""
        lr = float(group["lr"])
        wd = float(group["weight_decay"])
        eps = float(group["eps"])
        beta1, beta2 = (float(b) for b in group["betas"])
        for p in _params(group):
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            step = float(state["step"])
            exp_avg: Tensor = state["exp_avg"]
            exp_avg_sq: Tensor = state["exp_avg_sq"]
            if wd:
                p.mul_(1 - lr * wd)
            exp_avg.lerp_(p.grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            step_size = lr / (1 - beta1**step)
            denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)


def _params(group: dict[str, Any]) -> Iterable[Tensor]:
    params = group["params"]
    assert isinstance(params, list)
    return params


class MuonTrainer(InnerTrainer):
    """An :class:`InnerTrainer` whose optimizer is :class:`MuonAdamW` (kept across calls with
    ``keep_state``, fresh every call without, as the AdamW one)."""

    def __init__(
        self, model: GPT, cfg: InnerConfig, muon: MuonConfig, *, keep_state: bool = True
    ) -> None:
        super().__init__(model, cfg, keep_state=keep_state)
        self.muon = muon

    def optimizer(self) -> torch.optim.AdamW:
        if self._opt is None or not self.keep_state:
            self._opt = MuonAdamW.for_model(self.model, self.cfg, self.muon)
        return self._opt


def inner_trainer(
    model: GPT, cfg: InnerConfig, opt: str, muon: MuonConfig, *, keep_state: bool
) -> InnerTrainer:
    """The inner trainer named ``opt``: ``adamw`` (reference.inner's, what nodes run) or
    ``muon`` (:class:`MuonTrainer`)."""
    if opt == "adamw":
        return InnerTrainer(model, cfg, keep_state=keep_state)
    if opt == "muon":
        return MuonTrainer(model, cfg, muon, keep_state=keep_state)
    raise ValueError(f"inner optimizer {opt!r}: choose one of {', '.join(INNER_OPTS)}")
