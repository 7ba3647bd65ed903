"""Real multi-process torch.distributed (gloo on CPU) for tests.

`run_workers(fn, world_size, *args)` spawns `world_size` processes, each calling
`fn(rank, world_size, *args)` after `init_process_group("gloo")` on a free loopback port, and
returns the list of their return values in rank order. A worker's exception fails the call with the
worker's traceback. `fn` must be importable (a module-level function).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from bench.harness import forked
from protocol.devnet import free_port


def _entry(
    rank: int,
    world_size: int,
    port: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    results: Any,
    init_group: bool,
) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    try:
        if init_group:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=60),
            )
        results[rank] = ("ok", fn(rank, world_size, *args))
    except BaseException:  # reported to the parent, which re-raises
        results[rank] = ("error", traceback.format_exc())
    finally:
        if init_group and dist.is_initialized():
            dist.destroy_process_group()


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 300.0,
    init_group: bool = True,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` real processes; return their results."""
    with forked.context().Manager() as manager:
        results = manager.dict()
        port = free_port()
        procs = [
            forked.process(_entry, (r, world_size, port, fn, args, results, init_group))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
            p.join()
        if alive:
            raise TimeoutError(
                f"{len(alive)} of {world_size} workers still running after {timeout}s"
            )
        out: list[Any] = []
        failed: list[str] = []  # every worker's failure, not the first rank's only
        for rank in range(world_size):
            if rank not in results:
                code = procs[rank].exitcode
                failed.append(f"worker {rank} died without a result (exit code {code})")
                continue
            status, value = results[rank]
            if status == "error":
                failed.append(f"worker {rank} failed:\n{value}")
            out.append(value)
        if failed:
            raise RuntimeError("\n".join(failed))
        return out
