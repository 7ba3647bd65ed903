"""A node of several local ranks: FSDP2 (``fully_shard``) inside the node, DiLoCo across nodes.

Every local rank holds the model sharded by ``fully_shard`` (each block, then the root) over the
node's local group (gloo on CPU, NCCL on GPU) and its own chunk of the outer state
(:class:`~trainer.round.sharded_state.ShardOuterState`). A round:

1. the inner steps: the plain :class:`~reference.inner.InnerTrainer` on each rank with this rank's
   ``batch_size / W`` rows of every step's batch (FSDP averages the gradients over the ranks, so
   each step is the single-process step up to the order of fp32 sums);
2. the exchange on the canonical flat layout: the ranks all-gather the trained weights and the base
   into flat fp32 vectors, and the leader (local rank 0) encodes the packet with the same
   :func:`reference.codec.encode` as a single-process node: what it commits, signs and uploads is
   byte-identical to a single-process node's given the same weights, so nodes of 1, 2 and 4 ranks
   average together;
3. the leader averages with the other nodes' leaders, the mean goes to every local rank, each rank
   steps its chunk (bit-equal to the single-process outer step) and the new base is all-gathered
   back into the FSDP parameters.

The trace's boundary states are gathered to full tensors and committed with
:mod:`reference.trace`'s own functions, so its hashes are a single-process node's on the same
state. Checkpoints are gathered to the leader in the canonical format (reference.checkpoint): a
node of any size loads them (:meth:`ShardOuterState.of`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)
from torch.distributed.tensor import DTensor, distribute_tensor

from protocol.errors import ConfigError
from protocol.hashing import hash_state_dict
from reference.checkpoint import RoundCheckpoint
from reference.codec import WireFormat, encode
from reference.inner import InnerResult, InnerTrainer, StepInfo
from reference.model import GPT, evaluate
from reference.outer import OuterConfig, OuterState
from reference.trace import Boundary, TraceBuilder, boundary_state, commit_boundary
from trainer.network.collective import Check
from trainer.network.comm import Averager
from trainer.round.diloco import LocalWork, RoundOutcome, RoundSettings, round_trainer
from trainer.round.sharded_state import ShardOuterState

log = logging.getLogger(__name__)


def _full(t: Tensor) -> Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


class _FullView(nn.Module):
    """The full (gathered) parameters of a sharded model under their names, for
    :func:`reference.trace.boundary_state`."""

    def __init__(self, params: dict[str, Tensor]) -> None:
        super().__init__()
        self._full = params

    def named_parameters(  # type: ignore[override]
        self, *args: object, **kwargs: object
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self._full.items()


class _FullOptimizer:
    """An optimizer's Adam moments gathered to full tensors, keyed like the full parameters."""

    def __init__(self, opt: torch.optim.Optimizer, full: dict[int, Tensor]) -> None:
        self.param_groups = [
            {"params": [full[id(p)] for p in g["params"]]} for g in opt.param_groups
        ]
        self.state = {
            full[id(p)]: {k: _full(v) for k, v in opt.state[p].items()}
            for g in opt.param_groups
            for p in g["params"]
            if opt.state.get(p)
        }


class ShardedTraceBuilder(TraceBuilder):
    """:class:`TraceBuilder` over a sharded model: every rank gathers the boundary state (a
    collective), the leader commits it (reference.trace's hash) and hands it to ``keep``."""

    def __init__(self, *args: object, leader: bool, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.leader = leader

    def __call__(self, step: int) -> None:
        named = dict(self.model.named_parameters())
        full = {name: _full(p.detach()) for name, p in named.items()}
        by_id = {id(p): full[name] for name, p in named.items()}
        opt = self.optimizer()
        gathered = None if opt is None else _FullOptimizer(opt, by_id)
        if not self.leader:
            return
        state = boundary_state(_FullView(full), gathered)  # type: ignore[arg-type]
        assert self.base is not None  # a node of several ranks trains from its base (lockstep)
        boundary = commit_boundary(len(self.boundaries), step, state, self.base)
        self.boundaries.append(boundary)
        if self.keep is not None:
            self.keep(boundary, state)


def shard_model(
    model: GPT, mesh: DeviceMesh, *, offload: bool = False, bf16: bool = False,
    reshard: bool = True,
) -> GPT:  # fmt: skip
    """``fully_shard`` each block, then the root, over the node's local mesh (in place).
    ``reshard=False`` keeps each block's gathered parameters from its forward to its backward
    (one all-gather less per step, the full parameters held during the step)."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 \
        else MixedPrecisionPolicy()  # fmt: skip
    policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp, offload_policy=policy,
                    reshard_after_forward=reshard)  # fmt: skip
    fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=policy)
    return model


def local_rows(rows: Tensor, batch_size: int, steps: int, rank: int, world: int) -> Tensor:
    """Local rank ``rank``'s ``batch_size / world`` rows of each step's batch, in step order."""
    if batch_size % world:
        raise ConfigError(
            f"batch size {batch_size} does not split over {world} local ranks: "
            "use a batch size that the node's rank count divides"
        )
    if rows.shape[0] < steps * batch_size:
        raise ConfigError(
            f"{rows.shape[0]} rows do not fill {steps} inner steps of {batch_size} rows"
        )
    per = batch_size // world
    return (
        rows[: steps * batch_size].reshape(steps, world, per, -1)[:, rank].reshape(steps * per, -1)
    )


class ShardedDiLoCo:
    """DiLoCo for one local rank of a node of ``W`` ranks (``group``: the node's local group)."""

    def __init__(
        self, model: GPT, state: OuterState, group: dist.ProcessGroup, *,
        bf16_momentum: bool = False, offload: bool = False, device: str = "cpu",
        presharded: bool = False, reshard: bool = True,
    ) -> None:  # fmt: skip
        """``state``: the full outer state (a checkpoint of a node of any size); this rank keeps
        its chunk. ``presharded``: ``model`` went through :func:`shard_model` already;
        ``reshard``: :func:`shard_model`'s."""
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.leader_global = dist.get_global_rank(group, 0)
        self.layout = state.layout
        self.outer = ShardOuterState.of(state, self.rank, self.world, bf16_momentum=bf16_momentum)
        self.model = model
        self.inner: InnerTrainer | None = None
        if presharded:
            self.load_flat(state.base)
            return
        state.load_into(model)
        mesh = DeviceMesh.from_group(group, device)
        shard_model(model, mesh, offload=offload, reshard=reshard)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def _gather(self, piece: Tensor) -> Tensor:
        shard = self.outer.shard
        parts = [torch.empty(shard.chunk, dtype=piece.dtype) for _ in range(self.world)]
        dist.all_gather(parts, shard.padded(piece), group=self.group)
        return torch.cat(parts)[: shard.numel]

    def base(self) -> Tensor:
        """The full flat base weights (all ranks take part)."""
        return self._gather(self.outer.base)

    def momentum(self) -> Tensor:
        return self._gather(self.outer.momentum).float()

    def flat_params(self) -> Tensor:
        """The model's trained weights as the canonical flat fp32 vector (all ranks)."""
        named = dict(self.model.named_parameters())
        return self.layout.flatten({n: _full(named[n].detach()) for n in self.layout.names})

    @torch.no_grad()
    def load_flat(self, flat: Tensor) -> None:
        """Each rank copies its FSDP shard of every parameter out of the full flat vector."""
        views = self.layout.unflatten(flat)
        for name, p in self.model.named_parameters():
            if not isinstance(p, DTensor):
                p.copy_(views[name])
                continue
            full = views[name].to(p.to_local().device)
            mine = distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None)
            p.to_local().copy_(mine.to_local())

    def train_local(
        self, rows: Tensor, settings: RoundSettings,
        keep: Callable[[Boundary, dict[str, Tensor]], None] | None = None,
        on_step: Callable[[StepInfo], None] | None = None,
    ) -> LocalWork:  # fmt: skip
        """The round's inner steps from the base; the leader's work carries the packet.
        ``on_step``: after each inner step (this rank's rows: its ``tokens_per_s`` is the
        rank's)."""
        if WireFormat.parse(settings.wire_format) is WireFormat.SPARSE:
            raise ConfigError(
                "wire format sparse: a node of several ranks sends fp32, bf16 or int8 packets "
                "(the sparse format's error feedback is not sharded yet)"
            )
        origin = self.base()
        self.load_flat(origin)
        cfg = settings.inner
        per = replace(cfg, batch_size=cfg.batch_size // self.world)
        mine = local_rows(rows, cfg.batch_size, cfg.steps, self.rank, self.world)
        # a node of one rank's rule (a new ShardedDiLoCo, so a fresh state, on every adopt)
        trainer = self.inner = round_trainer(self.inner, self.model, per,
                                             carried=settings.keep_inner_state)  # fmt: skip
        builder = ShardedTraceBuilder(self.model, self.layout.unflatten(origin), leader=self.leader,
                                      optimizer=lambda: trainer._opt, keep=keep)  # fmt: skip
        done = trainer.train(mine, on_step=on_step, on_boundary=builder,
                             trace_interval=settings.trace_interval)  # fmt: skip
        inner = InnerResult(done.steps, done.tokens * self.world, done.losses, done.seconds)
        flat_local = self.flat_params()
        if not self.leader:  # the hashes, the packet and the trace are the leader's
            return LocalWork(b"", origin - flat_local, inner)
        base_hash = bytes(hash_state_dict(self.layout.unflatten(origin)))
        packet = encode(origin, flat_local, settings.wire_format)
        return LocalWork(base_hash, origin - flat_local, inner, packet, committed=builder.trace())

    def finish_round(
        self, local: LocalWork, averager: Averager | None, settings: RoundSettings,
        check: Check | None = None,
    ) -> RoundOutcome:  # fmt: skip
        """The leader averages with the other nodes (``averager``: its leaders' group, None on
        the other ranks); every rank steps its chunk; the new base goes into the FSDP model.
        The hashes (``base_hash``, ``result_hash``) are the leader's; the other ranks' are empty.
        If the leader's average fails, the other ranks wait in the broadcast until the group's
        timeout."""
        mean = torch.empty(self.layout.numel, dtype=torch.float32)
        sent = 0
        if self.leader:
            if averager is None:
                raise ConfigError("the node's leader rank needs the averager of the nodes' leaders")
            vector = local.packet if local.packet is not None else local.pseudo_gradient
            avg, sent = averager.average(vector,
                                         settings.wire_format, weight=local.inner.tokens,
                                         check=check)  # fmt: skip
            mean.copy_(avg)
        dist.broadcast(mean, src=self.leader_global, group=self.group)
        result = self.apply_mean(mean, settings.outer)
        if not self.leader:
            return RoundOutcome(local, b"", 0, 0)
        assert averager is not None
        return RoundOutcome(local, result, sent, averager.world_size)

    def apply_mean(self, mean: Tensor, cfg: OuterConfig) -> bytes:
        """Every rank: the outer step of its chunk with the nodes' ``mean`` (the full flat
        vector or this rank's chunk), the new base into the FSDP shards. Returns the new base's
        hash on the leader, b"" on the other ranks."""
        self.outer.step(mean, cfg)
        base = self.base()
        self.load_flat(base)
        return bytes(hash_state_dict(self.layout.unflatten(base))) if self.leader else b""

    def evaluate(self, rows: Tensor) -> float:
        """Every rank: the model's mean loss on ``rows`` (the same rows on every rank: each
        forward gathers the sharded parameters, a collective). The blocks are resharded after
        it: with ``reshard=False`` a forward without a backward leaves them gathered, and the
        weights loaded and trained next are the sharded ones."""
        loss = evaluate(self.model, rows)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
        return loss

    def checkpoint(self, round: int, run_id: bytes = bytes(32)) -> RoundCheckpoint | None:
        """The canonical checkpoint on the leader (None on the other ranks; all take part)."""
        base, momentum = self.base(), self.momentum()
        if not self.leader:
            return None
        return RoundCheckpoint.of(OuterState(self.layout, base, momentum), round, run_id)
