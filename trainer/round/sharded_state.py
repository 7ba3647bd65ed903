"""The outer state of a node of several local ranks, one canonical shard per rank, on the host.

The canonical layout is :class:`~reference.outer.FlatLayout`'s flat fp32 vector; a node of ``W``
local ranks cuts it into ``W`` contiguous chunks of ``ceil(numel / W)`` values (the last one
shorter), whatever FSDP's own per-parameter sharding is. Rank ``r`` keeps the base weights and the
Nesterov momentum of chunk ``r`` only (fp32, or bf16 momentum on request), so the node as a whole
holds 8 B/parameter of outer state (6 with bf16 momentum) instead of 8 per process.

The outer step of a chunk is :func:`reference.outer.outer_step_` on that chunk: the step is
elementwise, so the chunks put together are bit-equal to the single-process step on the same
pseudo-gradient. bf16 momentum is upcast to fp32 for the step and rounded back after it: not
bit-equal (its loss cost is ``bench.fsdp``'s ``bf16_momentum_loss_ratio``); checkpoints always hold
fp32 momentum in the canonical format (reference.checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from protocol.errors import ConfigError
from reference.outer import FlatLayout, OuterConfig, OuterState, outer_step_


@dataclass(frozen=True)
class ShardRange:
    """Rank ``rank``'s chunk ``[start, end)`` of a flat vector of ``numel`` values cut in
    ``world`` chunks of ``chunk`` values (the last may be shorter, or empty)."""

    rank: int
    world: int
    numel: int

    def __post_init__(self) -> None:
        if self.world <= 0 or not 0 <= self.rank < self.world:
            raise ConfigError(f"local rank {self.rank} is not in a node of {self.world} ranks")
        if self.numel <= 0:
            raise ConfigError(f"a model of {self.numel} parameters cannot be sharded")

    @property
    def chunk(self) -> int:
        return -(-self.numel // self.world)

    @property
    def start(self) -> int:
        return min(self.rank * self.chunk, self.numel)

    @property
    def end(self) -> int:
        return min(self.start + self.chunk, self.numel)

    def of(self, flat: Tensor) -> Tensor:
        """This rank's chunk of a full flat vector (a view)."""
        if flat.numel() != self.numel:
            raise ConfigError(
                f"flat vector has {flat.numel()} values, the layout needs {self.numel}"
            )
        return flat[self.start : self.end]

    def padded(self, piece: Tensor) -> Tensor:
        """``piece`` (this rank's chunk) zero-padded to ``chunk`` values (collectives need equal
        sizes)."""
        if piece.numel() == self.chunk:
            return piece.contiguous()
        out = torch.zeros(self.chunk, dtype=piece.dtype)
        out[: piece.numel()] = piece
        return out


class ShardOuterState:
    """One rank's chunk of the base weights and momentum (flat, CPU)."""

    def __init__(
        self, layout: FlatLayout, shard: ShardRange, base: Tensor, momentum: Tensor | None = None,
        *, bf16_momentum: bool = False,
    ) -> None:  # fmt: skip
        size = shard.end - shard.start
        if base.numel() != size or (momentum is not None and momentum.numel() != size):
            raise ConfigError(
                f"rank {shard.rank}'s shard holds {size} values: got base {base.numel()}, "
                f"momentum {None if momentum is None else momentum.numel()}"
            )
        self.layout = layout
        self.shard = shard
        self.base = base.detach().float().cpu().contiguous().clone()
        dtype = torch.bfloat16 if bf16_momentum else torch.float32
        self.momentum = (
            torch.zeros(size, dtype=dtype) if momentum is None else momentum.to(dtype).clone()
        )

    @classmethod
    def of(
        cls, state: OuterState, rank: int, world: int, *, bf16_momentum: bool = False
    ) -> ShardOuterState:
        """Rank ``rank``'s chunk of a full outer state (a checkpoint of any node's size)."""
        shard = ShardRange(rank, world, state.layout.numel)
        return cls(state.layout, shard, shard.of(state.base), shard.of(state.momentum),
                   bf16_momentum=bf16_momentum)  # fmt: skip

    @property
    def bf16_momentum(self) -> bool:
        return self.momentum.dtype == torch.bfloat16

    def nbytes(self) -> int:
        """Bytes of outer state this rank holds."""
        return self.base.nbytes + self.momentum.nbytes

    def step(self, avg: Tensor, cfg: OuterConfig) -> None:
        """The outer step of this chunk; ``avg`` is the full mean pseudo-gradient or its chunk."""
        g = avg.float().cpu().view(-1)
        if g.numel() == self.shard.numel:
            g = self.shard.of(g)
        if g.numel() != self.base.numel():
            raise ConfigError(
                f"pseudo-gradient has {g.numel()} values: neither the model's "
                f"{self.shard.numel} nor this shard's {self.base.numel()}"
            )
        if not self.bf16_momentum:
            outer_step_(self.base, self.momentum, g, cfg.lr, cfg.momentum)
            return
        m = self.momentum.float()
        outer_step_(self.base, m, g, cfg.lr, cfg.momentum)
        self.momentum.copy_(m)
