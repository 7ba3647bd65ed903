"""The pieces every collective of the node's exchange shares (trainer.network.allreduce's dense
all-reduce and trainer.network.sparse_gather's checked all-gather): a peer's packet check, one
collective started and waited for under the heartbeat watch, its timeout, and a clock of phases."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from protocol.errors import CollectiveError, TrainerError
from reference.codec import Packet
from trainer.network.coordination.heartbeat import wait_work

Check = Callable[[int, Packet, int | None], None]
"""``check(src, packet, weight)``: raise (ForgedPacketError) if rank ``src``'s packet (or its
all-reduce weight, None when unweighted) is not the one it committed to."""


def as_timedelta(timeout: float | timedelta) -> timedelta:
    td = timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout))
    if td.total_seconds() <= 0:
        raise TrainerError(f"all-reduce timeout must be positive, got {td.total_seconds()} s")
    return td


def run_collective(phase: str, timeout: timedelta, start: Callable[[], Any]) -> None:
    """Start one async collective and wait for it; any failure becomes CollectiveError."""
    try:
        work = start()
        if work is None:
            raise CollectiveError(f"all-reduce {phase}: torch.distributed returned no work handle")
        wait_work(work, timeout)  # work.wait, ended early when a peer's heartbeat stops
    except RuntimeError as exc:  # gloo/NCCL timeouts and peer failures (DistBackendError too)
        raise CollectiveError(
            f"all-reduce {phase} failed or timed out after {timeout.total_seconds():g} s "
            f"({exc}); a peer is gone or stalled: drop it from the round and re-form the group"
        ) from exc


class Clock:
    """Seconds per phase into ``timings`` (when given), for profiling the round."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def mark(self, phase: str) -> None:
        if self.timings is not None:
            now = time.perf_counter()
            self.timings[phase] = self.timings.get(phase, 0.0) + now - self.last
            self.last = now
