"""DiLoCo's outer state: the round's base weights and the Nesterov momentum, as flat fp32 CPU
tensors, and :func:`outer_step`, the one definition of the outer Nesterov step.

Bit-exact on every machine: :func:`outer_step` is a fixed sequence of single IEEE-754 fp32
operations (one multiply, or one add/subtract, per kernel), each rounded once. torch's ``add``
with ``alpha`` and ``addcmul`` become a fused multiply-add on AVX2/AVX-512 but not under
``ATEN_CPU_CAPABILITY=default`` (or on another vector unit), so those give different bits on
different machines; a multiply and an add in separate kernels cannot be fused. The ledger's audit
recomputes the step with this same function (it imports nothing else from the trainer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from protocol.errors import CheckpointError, ConfigError


@dataclass(frozen=True)
class OuterConfig:
    """Outer Nesterov SGD (DiLoCo defaults: lr 0.7, momentum 0.9)."""

    lr: float = 0.7
    momentum: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 < self.lr <= 10.0:
            raise ConfigError(f"outer lr must be in (0, 10], got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"outer momentum must be in [0, 1), got {self.momentum}")


class FlatLayout:
    """Parameter names, shapes and offsets of a model flattened into one fp32 vector."""

    def __init__(self, shapes: Mapping[str, torch.Size]) -> None:
        self.names = sorted(shapes)
        self.shapes = {n: torch.Size(shapes[n]) for n in self.names}
        self.offsets: dict[str, tuple[int, int]] = {}
        pos = 0
        for n in self.names:
            size = self.shapes[n].numel()
            self.offsets[n] = (pos, pos + size)
            pos += size
        self.numel = pos

    @classmethod
    def of(cls, model: nn.Module) -> FlatLayout:
        return cls({n: p.shape for n, p in model.named_parameters()})

    def flatten(self, tensors: Mapping[str, Tensor]) -> Tensor:
        missing = set(self.names) - set(tensors)
        if missing:
            raise CheckpointError(f"state is missing tensors {sorted(missing)}")
        return torch.cat([tensors[n].detach().float().cpu().reshape(-1) for n in self.names])

    def unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        if flat.numel() != self.numel:
            raise CheckpointError(
                f"flat vector has {flat.numel()} values, layout needs {self.numel}"
            )
        return {n: flat[a:b].view(self.shapes[n]) for n, (a, b) in self.offsets.items()}


def _check(base: Tensor, momentum: Tensor, avg: Tensor) -> None:
    for name, t in (("base", base), ("momentum", momentum), ("pseudo-gradient", avg)):
        if t.dtype != torch.float32:
            raise ConfigError(f"outer step {name} must be float32, got {t.dtype}")
    if not base.shape == momentum.shape == avg.shape:
        raise ConfigError(
            f"outer step shapes differ: base {tuple(base.shape)}, momentum "
            f"{tuple(momentum.shape)}, pseudo-gradient {tuple(avg.shape)}"
        )


def moved(trained: Tensor, base: Tensor, start: Tensor) -> Tensor:
    """The bounded overlap's move (trainer.round.bounded): ``trained + (base - start)``, the
    inner steps' progress since ``start`` rebased on the new ``base``. fp32 and elementwise, so
    the same bits flat or per parameter: the node moves its flat weights, the ledger's audit of
    the segment the move ends (ledger.judge.origin_check) moves each replayed parameter."""
    return trained + (base - start)


def outer_step_(base: Tensor, momentum: Tensor, avg: Tensor, lr: float, mu: float) -> None:
    """:func:`outer_step` in place on ``base`` and ``momentum`` (one temporary buffer).

    In-place ``add_``/``sub_`` without ``alpha`` are exact single roundings (``a + 1*b``), so
    the bits are those of :func:`outer_step`."""
    _check(base, momentum, avg)
    mu_t = torch.tensor(mu, dtype=torch.float32, device=base.device)
    lr_t = torch.tensor(lr, dtype=torch.float32, device=base.device)
    momentum.mul_(mu_t)
    momentum.add_(avg)
    d = torch.mul(momentum, mu_t)
    d.add_(avg)
    d.mul_(lr_t)
    base.sub_(d)


def outer_step(
    base: Tensor, momentum: Tensor, avg: Tensor, lr: float, mu: float
) -> tuple[Tensor, Tensor]:
    """Nesterov SGD (torch SGD, dampening 0), bit-exact on every machine and device.

    Returns new ``(base, momentum)``; inputs are untouched. With fp32 ``lr``/``mu`` constants
    (the Python floats rounded to fp32 once), in this order and nothing fused::

        m'    = (m * mu) + g
        base' = base - ((g + (m' * mu)) * lr)
    """
    _check(base, momentum, avg)
    new_base, new_m = base.clone(), momentum.clone()
    outer_step_(new_base, new_m, avg, lr, mu)
    return new_base, new_m


class OuterState:
    """Base weights and momentum of the current round boundary."""

    def __init__(self, layout: FlatLayout, base: Tensor, momentum: Tensor | None = None) -> None:
        self.layout = layout
        self.base = base.detach().float().cpu().contiguous().clone()
        self.momentum = (
            torch.zeros_like(self.base) if momentum is None else momentum.float().cpu().clone()
        )
        if self.momentum.shape != self.base.shape:
            raise CheckpointError("outer momentum and base weights differ in size")

    @classmethod
    def from_model(cls, model: nn.Module) -> OuterState:
        layout = FlatLayout.of(model)
        return cls(layout, layout.flatten(dict(model.named_parameters())))

    def pseudo_gradient(self, model: nn.Module) -> Tensor:
        """``base - local``, fp32 on CPU (what the attestation commits to)."""
        return self.base - self.layout.flatten(dict(model.named_parameters()))

    def step(self, avg_pseudo_gradient: Tensor, cfg: OuterConfig) -> None:
        """Nesterov SGD: ``m = mu*m + g; base -= lr * (g + mu*m)`` (:func:`outer_step`)."""
        g = avg_pseudo_gradient.float().cpu()
        if g.shape != self.base.shape:
            raise ConfigError(
                f"pseudo-gradient has {g.numel()} values, model has {self.base.numel()}"
            )
        outer_step_(self.base, self.momentum, g, cfg.lr, cfg.momentum)

    def step_range(self, start: int, end: int, avg: Tensor, cfg: OuterConfig) -> None:
        """:meth:`step` on values ``[start, end)`` only (elementwise, so the same bits): the
        outer step of each piece of the mean as the all-reduce lands it (``on_piece``)."""
        if not 0 <= start <= end <= self.base.numel() or avg.numel() != end - start:
            raise ConfigError(
                f"outer step range [{start}, {end}) with {avg.numel()} values does not fit "
                f"{self.base.numel()} parameters"
            )
        outer_step_(self.base[start:end], self.momentum[start:end], avg.float().view(-1),
                    cfg.lr, cfg.momentum)  # fmt: skip

    @torch.no_grad()
    def load_into(self, model: nn.Module) -> None:
        """Copy the base weights into the model (the inner model starts the next round here)."""
        views = self.layout.unflatten(self.base)
        for name, p in model.named_parameters():
            p.copy_(views[name])

    def weights(self) -> dict[str, Tensor]:
        return {n: t.clone() for n, t in self.layout.unflatten(self.base).items()}

    def momentum_tensors(self) -> dict[str, Tensor]:
        return {n: t.clone() for n, t in self.layout.unflatten(self.momentum).items()}
