"""Level 2 on tensors: is a pseudo-gradient the model's shape, finite, non-zero, of an honest
magnitude, and not a copy? Plus the usefulness scorer's interface (``ledger.judge.usefulness``).

Copies are found on *residuals*: each pseudo-gradient minus its projection on the round's mean
direction (the component every honest node shares), compared by cosine. A cosine is blind to
rescaling; noise lowers it only as much as the noise outweighs the residual; and tensors are laid
out by (shape, norm) rather than by name, so renaming (swapping same-shape tensors) does not hide
a copy either. Pure functions; :mod:`ledger.judge.pseudo_gradients` and
:mod:`ledger.judge.comparisons` apply them to a round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ledger.core.models import Attestation

Tensors = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Measured:
    """What the usefulness scorer measured: quality in [0, 1], why, and whether the node's own
    shard improved more than random data (False marks the pair suspicious for the audit)."""

    score: float
    reason: str
    on_shard: bool = True


class ShardMismatch(Exception):
    """The attested dataShard is not the shard the protocol assigns this node, round and work."""


UsefulnessFn = Callable[[Attestation, Tensors], Measured | None]
"""(attestation, pseudo_gradient) -> measurement, or None when the base blob is missing.
Raises :class:`ShardMismatch` when the attested shard is not the node's."""


@dataclass(frozen=True)
class Quality:
    score: float
    reason: str


def canonical_flat(tensors: Tensors) -> torch.Tensor:
    """One float64 vector, tensors ordered by (shape, norm): names play no part."""
    items = sorted(
        tensors.values(),
        key=lambda t: (tuple(t.shape), float(t.detach().double().norm())),
    )
    parts = [t.detach().reshape(-1).to(torch.float64) for t in items]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def integrity(tensors: Tensors, model: Tensors | None) -> tuple[str, str] | None:
    """(check, why) when the tensors cannot be a pseudo-gradient of the model, else None."""
    if model is not None:
        if set(tensors) != set(model):
            odd = sorted(set(tensors) ^ set(model))[:4]
            return "shape_mismatch", (
                f"pseudo-gradient names {len(tensors)} tensors, the model has {len(model)} "
                f"(differs in {odd}): upload base - local for every parameter"
            )
        for name, t in tensors.items():
            if tuple(t.shape) != tuple(model[name].shape):
                return "shape_mismatch", (
                    f"pseudo-gradient {name} has shape {tuple(t.shape)}, the model's is "
                    f"{tuple(model[name].shape)}"
                )
    if not tensors or all(t.numel() == 0 for t in tensors.values()):
        return "zero_update", "pseudo-gradient is empty: no useful work"
    for t in tensors.values():
        if not torch.isfinite(t).all():
            return "not_finite", "pseudo-gradient has NaN or infinite values"
    if all(not bool(t.any()) for t in tensors.values()):
        return "zero_update", "pseudo-gradient is zero: no useful work"
    return None


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


def residual(x: torch.Tensor, direction: torch.Tensor | None) -> torch.Tensor:
    """``x`` without its component along ``direction`` (unit vector), or ``x`` itself."""
    if direction is None:
        return x
    return x - torch.dot(x, direction) * direction


def unit(x: torch.Tensor) -> torch.Tensor | None:
    n = float(x.norm())
    return x / n if n > 0 else None


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() != b.numel():
        return 0.0
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(torch.dot(a, b)) / (na * nb)
