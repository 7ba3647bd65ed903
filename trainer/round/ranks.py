"""A node of several local ranks inside :class:`~trainer.round.node.NodeRunner`
(``coloco node run --local-ranks N``).

The node's process keeps everything that faces the run (its key, the ledger, the rendezvous, the
heartbeats, the checkpoint server, the process group of the round's nodes) and starts ``N`` rank
processes, torchrun-style: a gloo world of their own on a free local port
(:func:`~trainer.round.sharded_world.join_world`), one :class:`~trainer.round.sharded.ShardedDiLoCo`
each (FSDP2 over the ranks, one chunk of the outer state each). The node drives them with one
command at a time over a pipe; every rank runs the same collectives, local rank 0 answers::

    node process                              ranks 0..N-1 (their own gloo world)
    adopt(state)        ------ state ----->    each keeps its chunk, the model sharded
    train_local(rows)   ------ rows ------>    the inner steps; rank 0 encodes the packet
                        <-- steps, boundaries, the LocalWork (packet, trace, hashes) -- rank 0
    average with the other nodes (the run's process group, in the node process)
    finish_round        ------ mean ------>    each steps its chunk; rank 0: the new hash
    state / evaluate    <----- rank 0 -----    gathered for the checkpoint / the eval loss

Why a process of its own for the node: torch.distributed has one default process group per
process, the node's group of the round's nodes is that group (``trainer.network.group``), and it
is torn down with every other group of the process (``destroy_process_group``) whenever the
member list changes; the ranks' world must outlive it. Tensors cross the pipes in shared memory
(torch's reductions), so what crosses is mapped, not copied through the pipe.

What the node commits, signs and uploads is a single-process node's: the packet is
``reference.codec.encode`` of the gathered flat weights, the hashes and the trace are
``reference``'s on gathered full tensors, the checkpoint is the canonical one (sharded.py).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

import torch.distributed as dist
from torch import Tensor

from protocol.errors import ColocoError, ConfigError, TrainerError
from protocol.hashing import hash_state_dict
from reference.codec import WireFormat
from reference.inner import StepInfo, precision
from reference.model import GPT, GPTConfig
from reference.outer import OuterConfig, OuterState
from reference.trace import Boundary
from trainer.network.collective import Check
from trainer.network.comm import Averager
from trainer.round.diloco import DiLoCo, LocalWork, RoundOutcome, RoundSettings
from trainer.round.sharded import ShardedDiLoCo
from trainer.round.sharded_world import LocalRank, free_port, join_world, return_freed_memory

log = logging.getLogger(__name__)
OnMessage = Callable[[tuple[Any, ...]], None]
RESHARD = False
"""``fully_shard``'s ``reshard_after_forward`` inside a node: False keeps each block's gathered
parameters from its forward to its backward (one all-gather less per step; the full parameters
are held during a step). bench.fsdp's ``two_rank_speedup`` measures this setting."""


class RankPool:
    """The ``ranks`` processes of one node (spawned; each one intra-op thread) and their pipes."""

    def __init__(
        self, model: GPTConfig, seed: int, ranks: int, *, timeout_s: float = 300.0
    ) -> None:
        if ranks < 2:
            raise ConfigError(f"a pool of local ranks needs at least 2, got {ranks}")
        ctx = mp.get_context("spawn")
        port = free_port()
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for rank in range(ranks):
            mine, theirs = ctx.Pipe()
            args = (rank, ranks, port, model, seed, timeout_s, theirs)
            proc = ctx.Process(target=_rank_main, args=args, name=f"coloco-rank{rank}", daemon=True)
            proc.start()
            theirs.close()  # the rank's end lives in the rank: its exit is an EOF here
            self.conns.append(mine)
            self.procs.append(proc)
        self.call("ping")  # every rank in the node's world: the node joins nothing before
        log.info("started %d local ranks (pids %s)", ranks, [p.pid for p in self.procs])

    @property
    def size(self) -> int:
        return len(self.conns)

    def call(self, cmd: str, arg: object = None, on_message: OnMessage | None = None) -> Any:
        """Every rank runs ``cmd``; returns local rank 0's value. Rank 0's messages before its
        answer (inner steps, boundary states) go to ``on_message``. A rank that fails or exits
        stops the pool (the others may be waiting in a collective) and raises."""
        if not self.conns:
            raise TrainerError("the node's local ranks have stopped")
        for conn in self.conns:
            conn.send((cmd, arg))
        pending = set(range(self.size))
        value = None
        while pending:
            for ready in wait([self.conns[r] for r in pending]):
                rank = next(r for r in pending if self.conns[r] is ready)
                try:
                    msg = self.conns[rank].recv()
                except EOFError:
                    code = self.procs[rank].exitcode
                    self.close()
                    raise TrainerError(
                        f"local rank {rank} exited (code {code}) during {cmd!r}: see its log "
                        "above; the node stops"
                    ) from None
                if msg[0] == "ok":
                    pending.discard(rank)
                    value = msg[1] if rank == 0 else value
                elif msg[0] == "error":
                    self.close()
                    kind = ConfigError if msg[1] == "ConfigError" else TrainerError
                    raise kind(f"local rank {rank}, {cmd!r}: {msg[2]}")
                elif on_message is not None:
                    on_message(msg)
        return value

    def close(self, wait_s: float = 10.0) -> None:
        """Stop the ranks (a rank stuck in a collective is terminated after ``wait_s``)."""
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("stop", None))
        for proc in self.procs:
            proc.join(wait_s)
            if proc.is_alive():
                log.warning("local rank %s did not stop in %.0f s: terminated", proc.name, wait_s)
                proc.terminate()
                proc.join(wait_s)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []


class RankedDiLoCo(DiLoCo):
    """:class:`DiLoCo`'s round for :class:`~trainer.round.node.NodeRunner`, run by the node's
    local ranks: the model and the outer state live in the ranks (``state`` gathers it)."""

    def __init__(self, pool: RankPool, state: OuterState) -> None:
        # no DiLoCo.__init__: the model and the outer state are the ranks'
        self.pool = pool
        self.layout = state.layout
        self.inner = None
        pool.call("adopt", state)

    @property
    def state(self) -> OuterState:
        """The outer state gathered from the ranks (a copy: writing it changes nothing)."""
        base, momentum = self.pool.call("state")
        return OuterState(self.layout, base, momentum)

    @state.setter
    def state(self, value: OuterState) -> None:
        raise TrainerError("a node of several ranks holds its outer state in the ranks: adopt it")

    def base_hash(self) -> bytes:
        return bytes(self.pool.call("hash"))

    def train_local(
        self,
        rows: Tensor,
        settings: RoundSettings,
        on_step: Callable[[StepInfo], None] | None = None,
        budget_s: float | None = None,
        start: Tensor | None = None,
        *,
        residual: Tensor | None = None,
        keep: Callable[[Boundary, dict[str, Tensor]], None] | None = None,
        landing: Callable[[], None] | None = None,
        lazy_trace: bool = False,
    ) -> LocalWork:
        """The ranks' inner steps from the base; rank 0's steps and boundary states go to
        ``on_step`` and ``keep`` as they happen (its trace whole on return, ``lazy_trace`` or
        not)."""
        if budget_s is not None or start is not None or landing is not None:
            raise ConfigError(
                "a node of several local ranks trains whole rounds from the base weights: "
                "--time-box and --overlap are not built for it; drop them or --local-ranks"
            )
        if WireFormat.parse(settings.wire_format) is WireFormat.SPARSE:
            raise ConfigError(
                "wire format sparse: a node of several local ranks sends fp32, bf16 or int8 "
                "packets (the sparse format's error feedback is not sharded yet)"
            )

        def message(msg: tuple[Any, ...]) -> None:
            if msg[0] == "step" and on_step is not None:
                on_step(msg[1])
            elif msg[0] == "boundary" and keep is not None:
                keep(msg[1], msg[2])

        work = self.pool.call("train", (rows, settings), on_message=message)
        assert isinstance(work, LocalWork)
        return work

    def finish_round(
        self, local: LocalWork, averager: Averager, settings: RoundSettings,
        check: Check | None = None,
    ) -> RoundOutcome:  # fmt: skip
        """Average with the other nodes here, then every rank steps its chunk with the mean.
        Raises CollectiveError with the state untouched (the ranks are not told)."""
        avg, sent = self.sync_pseudo_gradient(local, averager, settings, check)
        result = self.pool.call("step", (avg, settings.outer))
        return RoundOutcome(local, bytes(result), sent, averager.world_size)

    def sync_inner_model(self) -> None:
        self.pool.call("reload")

    def snapshot(self) -> object:
        self.pool.call("snapshot")  # each rank keeps a copy of its chunk
        return self.pool

    def restore(self, snapshot: object) -> None:
        self.pool.call("restore")

    def evaluate(self, rows: Tensor) -> float:
        return float(self.pool.call("eval", rows))

    def outer_step(self, avg: Tensor, settings: RoundSettings) -> None:
        raise TrainerError("a node of several ranks steps in finish_round (the ranks' chunks)")

    def load_flat(self, flat: Tensor) -> None:
        raise TrainerError("a node of several ranks loads weights through adopt")


class _Rank:
    """One rank process's side of :class:`RankPool`'s commands (``do_<command>``)."""

    def __init__(self, where: LocalRank, model: GPT, conn: Connection) -> None:
        self.where = where
        self.model = model
        self.conn = conn
        self._node: ShardedDiLoCo | None = None
        self.saved: tuple[Tensor, Tensor] | None = None

    @property
    def node(self) -> ShardedDiLoCo:
        if self._node is None:
            raise TrainerError("this rank holds no state yet: the node adopts one first")
        return self._node

    def do_ping(self, _: None) -> None:
        pass

    def do_adopt(self, state: OuterState) -> None:
        first = self._node is None  # the model is sharded once, later states are loaded in
        self._node = ShardedDiLoCo(self.model, state, self.where.group, presharded=not first,
                                   reshard=RESHARD)  # fmt: skip
        self.saved = None

    def do_train(self, arg: tuple[Tensor, RoundSettings]) -> LocalWork | None:
        rows, settings = arg
        lead = self.where.leader
        send = self.conn.send
        keep = (lambda b, s: send(("boundary", b, s))) if lead else None
        on_step = (lambda info: send(("step", info))) if lead else None
        with precision("cpu"):
            local = self.node.train_local(rows, settings, keep=keep, on_step=on_step)
        return local if lead else None

    def do_snapshot(self, _: None) -> None:
        outer = self.node.outer
        self.saved = (outer.base.clone(), outer.momentum.clone())

    def do_restore(self, _: None) -> None:
        if self.saved is None:
            raise TrainerError("restore without a snapshot")
        outer = self.node.outer
        outer.base.copy_(self.saved[0])
        outer.momentum.copy_(self.saved[1])
        self.do_reload(None)

    def do_reload(self, _: None) -> None:
        self.node.load_flat(self.node.base())

    def do_step(self, arg: tuple[Tensor, OuterConfig]) -> bytes:
        mean, cfg = arg
        return self.node.apply_mean(mean, cfg)

    def do_state(self, _: None) -> tuple[Tensor, Tensor] | None:
        base, momentum = self.node.base(), self.node.momentum()
        return (base, momentum) if self.where.leader else None

    def do_hash(self, _: None) -> bytes:
        base = self.node.base()
        return bytes(hash_state_dict(self.node.layout.unflatten(base))) if self.where.leader \
            else b""  # fmt: skip

    def do_eval(self, rows: Tensor) -> float:
        return self.node.evaluate(rows)


def _rank_main(  # noqa: PLR0917 - multiprocessing's positional arguments
    rank: int, world: int, port: int, cfg: GPTConfig, seed: int, timeout_s: float,
    conn: Connection,
) -> None:  # fmt: skip
    """A rank process: join the node's world, then answer commands until ``stop`` (or until
    the node's end of the pipe closes)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the node, and the node the ranks
    return_freed_memory()
    where = join_world(rank, [world], port, timeout_s=timeout_s)
    me = _Rank(where, GPT(cfg, seed=seed), conn)
    try:
        while True:
            try:
                cmd, arg = conn.recv()
            except EOFError:
                return  # the node process is gone
            if cmd == "stop":
                return
            try:
                conn.send(("ok", getattr(me, f"do_{cmd}")(arg)))
            except Exception as exc:  # the node raises it, naming this rank
                log.exception("local rank %d: %s failed", rank, cmd)
                text = (
                    exc.message if isinstance(exc, ColocoError) else f"{type(exc).__name__}: {exc}"
                )
                conn.send(("error", type(exc).__name__, text))
    finally:
        dist.destroy_process_group()
