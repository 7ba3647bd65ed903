"""Processes for nodes of several local ranks: one gloo world, a local group per node and a group
of the nodes' leaders (local rank 0), for tests, benchmarks and a torchrun-style launch.

``sizes = [1, 2, 4]`` starts 7 processes: node 0 is global rank 0, node 1 ranks 1-2, node 2 ranks
3-6; the leaders' group is ranks 0, 1 and 3. Each process runs on one intra-op thread.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from protocol.errors import ConfigError

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@dataclass(frozen=True)
class LocalRank:
    """Where this process sits: node ``node`` of ``sizes``, local rank ``local_rank``."""

    node: int
    local_rank: int
    sizes: tuple[int, ...]
    group: dist.ProcessGroup
    leaders: dist.ProcessGroup | None  # the nodes' leaders' group (None off the leaders)

    @property
    def leader(self) -> bool:
        return self.local_rank == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def placement(rank: int, sizes: Sequence[int]) -> tuple[int, int]:
    """(node, local rank) of global ``rank``."""
    start = 0
    for node, size in enumerate(sizes):
        if rank < start + size:
            return node, rank - start
        start += size
    raise ConfigError(f"rank {rank} is outside a world of nodes of {list(sizes)} ranks")


def join_world(
    rank: int, sizes: Sequence[int], port: int, timeout_s: float = 120, backend: str = "gloo"
) -> LocalRank:
    """Init the world (``backend``: gloo on CPU; ``cpu:gloo,cuda:nccl`` on GPUs, where the outer
    state's collectives stay on the host) and make every node's local group and the leaders'
    group (every process makes all of them, in the same order, as torch.distributed needs)."""
    if not sizes or min(sizes) <= 0:
        raise ConfigError(f"node sizes must be positive rank counts, got {list(sizes)}")
    torch.set_num_threads(1)
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=sum(sizes), timeout=timeout)  # fmt: skip
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    groups = [dist.new_group(list(range(a, a + s)), backend=backend)
              for a, s in zip(starts, sizes, strict=True)]  # fmt: skip
    leaders = dist.new_group(starts, backend=backend)
    node, local = placement(rank, sizes)
    return LocalRank(node, local, tuple(sizes), groups[node], leaders if local == 0 else None)


def return_freed_memory(threshold: int = 1 << 16) -> bool:
    """Serve every allocation above ``threshold`` bytes from its own mapping (glibc's
    ``M_MMAP_THRESHOLD``), so the round's transient full-size buffers (the gathered weights, the
    boundary states) go back to the OS when freed instead of staying in the heap: the host memory
    of a rank is then its outer state, its model shard and its optimizer. False off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))


def _entry(  # noqa: PLR0917 - torch.multiprocessing's positional arguments
    rank: int, fn: Callable[..., None], sizes: Sequence[int], port: int, backend: str,
    args: tuple[Any, ...],
) -> None:  # fmt: skip
    os.environ["OMP_NUM_THREADS"] = "1"
    return_freed_memory()
    where = join_world(rank, sizes, port, backend=backend)
    try:
        fn(where, *args)
    finally:
        dist.destroy_process_group()


def spawn_nodes(
    fn: Callable[..., None], sizes: Sequence[int], *args: Any, backend: str = "gloo",
    start_method: str = "spawn",
) -> None:  # fmt: skip
    """Run ``fn(local_rank: LocalRank, *args)`` in ``sum(sizes)`` fresh processes; raises if
    any of them fails. ``start_method="forkserver"``: forked from the server that
    bench.harness.forked preloaded (torch and the node imported once)."""
    spawn_args = (fn, list(sizes), free_port(), backend, args)
    start = mp.start_processes  # type: ignore[attr-defined]
    start(_entry, args=spawn_args, nprocs=sum(sizes), join=True, start_method=start_method)  # type: ignore[no-untyped-call]
