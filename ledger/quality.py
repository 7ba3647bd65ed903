"""Level 2: is a pseudo-gradient worth anything?

Zero tensors and copies of another node's pseudo-gradient score nothing. When a usefulness
scorer is configured (the trainer's own-shard vs random-shard test, ``trainer.scoring``), its
score in [0, 1] is the quality; otherwise quality is 1.0 and the receipt says it was not measured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ledger.models import Attestation

log = logging.getLogger(__name__)

COPY_COSINE = 0.999

Tensors = Mapping[str, torch.Tensor]
UsefulnessFn = Callable[["Attestation", Tensors], "tuple[float, str] | None"]
"""(attestation, pseudo_gradient) -> (quality in [0, 1], why), or None when not measurable."""


@dataclass(frozen=True)
class Quality:
    score: float
    reason: str


def _flat(tensors: Tensors) -> torch.Tensor:
    parts = [tensors[name].detach().reshape(-1).to(torch.float64) for name in sorted(tensors)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def assess(
    ordered: Sequence[tuple[Attestation, Tensors]],
    *,
    usefulness: UsefulnessFn | None,
) -> dict[str, Quality]:
    """Quality of each node's pseudo-gradient; ``ordered`` is by arrival (first is original)."""
    out: dict[str, Quality] = {}
    seen: list[tuple[str, torch.Tensor, tuple[str, ...]]] = []
    for att, tensors in ordered:
        node = att.node
        flat = _flat(tensors)
        names = tuple(sorted(f"{n}:{tuple(t.shape)}" for n, t in tensors.items()))
        norm = float(flat.norm())
        if flat.numel() == 0 or norm == 0.0 or not torch.isfinite(flat).all():
            out[node] = Quality(0.0, "pseudo-gradient is zero or not finite: no useful work")
            continue
        copied = None
        for other, other_flat, other_names in seen:
            if other_names == names and other_flat.numel() == flat.numel():
                cos = float(torch.dot(flat, other_flat) / (norm * float(other_flat.norm())))
                if cos >= COPY_COSINE:
                    copied = (other, cos)
                    break
        seen.append((node, flat, names))
        if copied is not None:
            out[node] = Quality(
                0.0,
                f"pseudo-gradient copies node {copied[0]}'s (cosine {copied[1]:.4f}), "
                "which arrived first",
            )
            continue
        if usefulness is None:
            out[node] = Quality(1.0, "usefulness not measured (no scorer configured)")
            continue
        try:
            measured = usefulness(att, tensors)
        except Exception as exc:  # the scorer is external code: record why, score zero
            log.warning("usefulness scorer failed for %s: %s", node, exc)
            out[node] = Quality(0.0, f"usefulness could not be measured: {exc}")
            continue
        if measured is None:
            out[node] = Quality(
                1.0,
                "usefulness not measured (base checkpoint blob missing or shard not rebuildable)",
            )
            continue
        score = min(max(measured[0], 0.0), 1.0) if math.isfinite(measured[0]) else 0.0
        out[node] = Quality(score, measured[1])
    return out
