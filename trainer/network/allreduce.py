"""Quantized all-reduce of a pseudo-gradient: every rank ends with the same, bit for bit, mean.

Algorithm (all formats): reduce-scatter by owner, then all-gather.

1. The packet is cut into `world` equal chunks of whole int8 blocks. `all_to_all_single` sends
   chunk r of every rank to rank r, still encoded (int8 codes + fp32 scales, or bf16, or fp32).
2. Rank r decodes the `world` copies of its chunk and sums them in fp32 in rank order 0, 1, ...,
   divides by `world`, and re-encodes the mean chunk in the same wire format (fresh block scales).
3. `all_gather` hands every rank every mean chunk; each rank decodes the same bytes, so all ranks
   hold identical averages.

Why not the alternatives: summing int8 codes overflows (int8) or needs 4-byte int32 lanes on the
wire, which loses the whole saving; gathering every rank's full int8 packet costs (world-1) * N
bytes per rank, which beats a 2 (world-1)/world * 4N fp32 ring all-reduce by only 8/world (2x at 4
ranks). Reduce-scatter + all-gather in int8 costs 2 (world-1)/world * N (1 + 4/block) bytes, 3.94x
less than fp32 at block 256, for one extra quantization of the (smaller) mean.

Weighted mean (heterogeneous nodes): with ``weight=`` (this rank's tokens of the round) the ranks
first all-gather their weights (8 bytes each), and step 2 sums ``decode(chunk_src) * w_src`` in
rank order and divides by ``sum(w)``, so a node that ran fewer inner steps counts for less, as the
ledger pays by tokens. Each product and sum is its own fp32 kernel (no fused multiply-add), so the
mean stays bit-identical on every rank and machine.

`bytes_sent` counts what this rank puts on the wire: (world-1) encoded chunks in each phase
(pairwise all-to-all, ring all-gather); transport headers are not counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist

from protocol.errors import CollectiveError, TrainerError
from reference.codec import Packet, WireFormat, decode_into, quantize
from reference.codec.formats import DEFAULT_BLOCK_SIZE
from reference.mean import chunk_packet, chunking, decode_gathered, reduce_chunk, unit_of, zero_pad
from trainer.network.coordination.heartbeat import is_watching, wait_work

log = logging.getLogger(__name__)

PIECE_BYTES = 1 << 19
"""Bytes of payload per point-to-point piece of the pipelined exchange (512 KiB)."""


def _as_timedelta(timeout: float | timedelta) -> timedelta:
    td = timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout))
    if td.total_seconds() <= 0:
        raise TrainerError(f"all-reduce timeout must be positive, got {td.total_seconds()} s")
    return td


def _collective(
    phase: str, timeout: timedelta, start: Callable[[], dist.Work | _Waited | None]
) -> None:
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


def _to_packet(
    x: torch.Tensor | Packet, fmt: WireFormat | int | str | None, block_size: int
) -> Packet:
    if isinstance(x, Packet):
        if fmt is not None and WireFormat.parse(fmt) is not x.fmt:
            raise TrainerError(
                f"packet is {x.fmt.name} but fmt={fmt!r} was asked for: pass fmt=None with a packet"
            )
        return x
    if fmt is None:
        raise TrainerError("average() of a tensor needs fmt (fp32, bf16 or int8)")
    return quantize(x, fmt, block_size=block_size)


def average(
    x: torch.Tensor | Packet,
    group: dist.ProcessGroup | None = None,
    fmt: WireFormat | int | str | None = None,
    timeout: float | timedelta = 60.0,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    weight: int | None = None,
    timings: dict[str, float] | None = None,
    pipelined: bool | None = None,
    on_piece: Callable[[int, int, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, int]:
    """Mean over the ranks of `group` of `x` (a fp32 tensor, encoded in `fmt`, or a Packet).

    With `weight` (every rank passes its own, e.g. its tokens), the mean is weighted by them.
    Returns `(mean, bytes_sent)`: `mean` is fp32 in the shape of `x` and bit-identical on every
    rank; `bytes_sent` is what this rank put on the wire. Raises CollectiveError when a collective
    fails or does not finish within `timeout` (seconds or timedelta). `pipelined` (default: on
    gloo) exchanges pieces point to point so the wire and the CPU work overlap (same bits);
    `timings`, when given, receives the seconds spent per phase. `on_piece(start, end, values)`,
    when given, is called once for every range of the flat mean as soon as its final values are
    decoded (the pipelined exchange: piece by piece, while later pieces are still on the wire;
    otherwise once, for the whole vector), so elementwise work on the mean (the outer step)
    overlaps the wire; the ranges cover ``[0, numel)`` exactly once.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise TrainerError("torch.distributed is not initialized: call init_process_group first")
    wait_for = _as_timedelta(timeout)
    packet = _to_packet(x, fmt, block_size)
    world = dist.get_world_size(group)
    if world == 1:
        mean = decode_into(torch.empty(packet.shape, device=packet.device), packet)
        if on_piece is not None:
            on_piece(0, packet.numel, mean.view(-1))
        return mean, 0
    rank = dist.get_rank(group)
    device = packet.device
    clock = _Clock(timings)
    weights = None
    if weight is not None:
        weights = _gather_weights(weight, group, wait_for, device)
    clock.mark("weights")

    if pipelined is None:  # on gloo, watched or not (the watch polls a waiter thread, _Waited)
        pipelined = dist.get_backend(group) == "gloo"
    if pipelined:
        mean, mine_nbytes = _pipelined(packet, group, wait_for=wait_for, weights=weights,
                                       world=world, rank=rank, clock=clock,
                                       on_piece=on_piece)  # fmt: skip
    else:
        mean, mine_nbytes = _collectives(packet, group, wait_for=wait_for, weights=weights,
                                         world=world, rank=rank, clock=clock)  # fmt: skip
        if on_piece is not None:
            on_piece(0, packet.numel, mean.view(-1))
    bytes_sent = 2 * (world - 1) * mine_nbytes + (8 * (world - 1) if weights else 0)
    log.debug(
        "rank %d averaged %d values as %s: %d bytes sent",
        rank,
        packet.numel,
        packet.fmt.name,
        bytes_sent,
    )
    return mean, bytes_sent


class _Clock:
    """Seconds per phase into ``timings`` (when given), for profiling the round."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def mark(self, phase: str) -> None:
        if self.timings is not None:
            now = time.perf_counter()
            self.timings[phase] = self.timings.get(phase, 0.0) + now - self.last
            self.last = now


def _gather_weights(
    weight: int, group: dist.ProcessGroup | None, timeout: timedelta, device: torch.device
) -> list[int]:
    if weight <= 0:
        raise TrainerError(f"all-reduce weight must be positive, got {weight}")
    world = dist.get_world_size(group)
    mine = torch.tensor([int(weight)], dtype=torch.int64, device=device)
    out = torch.empty(world, dtype=torch.int64, device=device)
    _collective(
        "all_gather (weights)",
        timeout,
        partial(dist.all_gather_into_tensor, out, mine, group=group, async_op=True),
    )
    weights = [int(w) for w in out.cpu().tolist()]
    if min(weights) <= 0:
        raise CollectiveError(f"a peer sent a non-positive all-reduce weight: {weights}")
    return weights


def _collectives(
    packet: Packet,
    group: dist.ProcessGroup | None,
    *,
    wait_for: timedelta,
    weights: list[int] | None,
    world: int,
    rank: int,
    clock: _Clock,
) -> tuple[torch.Tensor, int]:
    """Reduce-scatter by all-to-all, reduce, all-gather: three collectives in a row (NCCL)."""
    k, chunk = chunking(packet, world)
    device = packet.device
    # 1. reduce-scatter: chunk r of every rank goes to rank r, still encoded
    send = zero_pad(packet.payload, world * chunk)
    recv = torch.empty_like(send)
    _collective(
        "all_to_all",
        wait_for,
        partial(dist.all_to_all_single, recv, send, group=group, async_op=True),
    )
    recv_scales = None
    if packet.scales is not None:
        send_scales = zero_pad(packet.scales, world * k)
        recv_scales = torch.empty_like(send_scales)
        _collective(
            "all_to_all (scales)",
            wait_for,
            partial(dist.all_to_all_single, recv_scales, send_scales, group=group, async_op=True),
        )
    clock.mark("all_to_all")
    # 2. this rank's chunk: fp32 sum in rank order, mean, re-encoded
    parts = [
        chunk_packet(
            packet,
            recv[src * chunk : (src + 1) * chunk],
            None if recv_scales is None else recv_scales[src * k : (src + 1) * k],
        )
        for src in range(world)
    ]
    mine = reduce_chunk(packet, parts, weights)
    clock.mark("reduce")
    # 3. all-gather the mean chunks; every rank decodes the same bytes
    gathered = torch.empty(world * chunk, dtype=mine.payload.dtype, device=device)
    _collective(
        "all_gather",
        wait_for,
        partial(dist.all_gather_into_tensor, gathered, mine.payload, group=group, async_op=True),
    )
    gathered_scales = None
    if mine.scales is not None:
        gathered_scales = torch.empty(world * k, dtype=torch.float32, device=device)
        _collective(
            "all_gather (scales)",
            wait_for,
            partial(
                dist.all_gather_into_tensor,
                gathered_scales,
                mine.scales,
                group=group,
                async_op=True,
            ),
        )
    clock.mark("all_gather")
    mean = decode_gathered(packet, gathered, gathered_scales, world * chunk)
    clock.mark("decode")
    return mean, mine.nbytes


def _same(work: dist.Work) -> dist.Work:
    return work


_KEEP_DROPPED = 4
_DROPPED: list[list[list[list[dist.Work]]]] = []
"""The pending works of the last few failed pipelined exchanges, kept referenced: letting a
pending gloo work go makes destroying its process group block until the work's own timeout (the
heartbeat watch drops a stalled exchange long before that)."""


class _Waited:
    """Works waited for in a thread of their own. gloo's point-to-point works report
    ``is_completed()`` only after ``wait()``, so the heartbeat watch (:func:`wait_work`, which
    polls) could never see them finish; this waits for them in a daemon thread and reports
    completion to the poll. A peer that stalls leaves the thread blocked in ``wait`` until the
    collective timeout; the watch has raised long before, and the thread keeps the works
    referenced (a dropped pending gloo work makes destroying its group block)."""

    def __init__(self, works: list[dist.Work], timeout: timedelta) -> None:
        self._works = works
        self._done = threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(timeout,), daemon=True).start()

    def _run(self, timeout: timedelta) -> None:
        try:
            for work in self._works:
                work.wait(timeout=timeout)
        except BaseException as exc:  # handed to the waiting thread by wait()
            self._error = exc
        finally:
            self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._done.wait(None if timeout is None else timeout.total_seconds()):
            raise CollectiveError(f"point-to-point pieces did not finish within {timeout}")
        if self._error is not None:
            raise self._error
        return True


def _pieces(packet: Packet, k: int) -> list[tuple[int, int]]:
    """Block-aligned [start, end) unit ranges of one chunk of ``k`` units, ~PIECE_BYTES each."""
    unit_bytes = unit_of(packet) * packet.payload.element_size()
    step = max(1, PIECE_BYTES // unit_bytes)
    return [(a, min(a + step, k)) for a in range(0, k, step)]


def _pipelined(
    packet: Packet,
    group: dist.ProcessGroup | None,
    *,
    wait_for: timedelta,
    weights: list[int] | None,
    world: int,
    rank: int,
    clock: _Clock,
    on_piece: Callable[[int, int, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, int]:
    """The same reduce-scatter + all-gather, point to point in pieces of ~PIECE_BYTES: every
    receive and send is posted at once, each piece of this rank's chunk is reduced as soon as
    every rank's copy of it has arrived and its mean is sent at once, and each mean piece is
    decoded as it lands. The link stays busy while the CPU works (gloo's collectives would run
    the three phases one after another), and the bits are those of :func:`_collectives`."""
    k, chunk = chunking(packet, world)
    unit = unit_of(packet)
    device = packet.device
    payload = zero_pad(packet.payload, world * chunk)
    scales = None if packet.scales is None else zero_pad(packet.scales, world * k)
    peers = [p for p in range(world) if p != rank]
    peer_rank = {p: p if group is None else dist.get_global_rank(group, p) for p in peers}
    pieces = _pieces(packet, k)
    n = len(pieces)

    def values(c: int, a: int, b: int) -> slice:  # piece [a, b) of chunk c, in values
        return slice(c * chunk + a * unit, c * chunk + b * unit)

    def blocks(c: int, a: int, b: int) -> slice:  # the same piece's scales
        return slice(c * k + a, c * k + b)

    def post(op: Callable[..., dist.Work | None], t: torch.Tensor, p: int, tag: int) -> dist.Work:
        work = op(t, peer_rank[p], group=group, tag=tag)
        if work is None:
            raise CollectiveError("all-reduce: torch.distributed returned no work handle")
        return work

    watched = is_watching()  # the heartbeat watch polls: wait in a thread it can poll

    def landed(sl: slice) -> None:  # these values of the mean are final: hand them over
        a, b = sl.start, min(sl.stop, packet.numel)
        if on_piece is not None and a < b:
            on_piece(a, b, out[a:b])

    def wait(phase: str, works: list[dist.Work]) -> None:
        if watched:
            _collective(phase, wait_for, partial(_Waited, works, wait_for))
            return
        for work in works:
            _collective(phase, wait_for, partial(_same, work))

    posted: list[list[list[dist.Work]]] = []  # every work posted, kept if the exchange fails
    try:
        # phase 1 receives: every peer's copy of this rank's chunk, piece by piece
        recv = {p: torch.empty(chunk, dtype=payload.dtype, device=device) for p in peers}
        recv_s = {p: torch.empty(k, dtype=torch.float32, device=device) for p in peers}
        got: list[list[dist.Work]] = [[] for _ in range(n)]
        posted.append(got)
        # phase 2 receives: every peer's mean chunk, into the gathered buffers
        gathered = torch.empty(world * chunk, dtype=payload.dtype, device=device)
        gathered_s = torch.empty(world * k, dtype=torch.float32, device=device)
        means: list[list[dist.Work]] = [[] for _ in range(n)]
        posted.append(means)
        for j, (a, b) in enumerate(pieces):
            for p in peers:
                got[j].append(post(dist.irecv, recv[p][a * unit : b * unit], p, 4 * j))
                means[j].append(post(dist.irecv, gathered[values(p, a, b)], p, 4 * j + 2))
                if scales is not None:
                    got[j].append(post(dist.irecv, recv_s[p][a:b], p, 4 * j + 1))
                    means[j].append(post(dist.irecv, gathered_s[blocks(p, a, b)], p, 4 * j + 3))
        sends: list[dist.Work] = []
        posted.append([sends])
        for j, (a, b) in enumerate(pieces):  # phase 1 sends: chunk p of this rank goes to p
            for p in peers:
                sends.append(post(dist.isend, payload[values(p, a, b)], p, 4 * j))
                if scales is not None:
                    sends.append(post(dist.isend, scales[blocks(p, a, b)], p, 4 * j + 1))
        out = torch.empty(world * chunk, dtype=torch.float32, device=device)
        mine_nbytes = 0
        for j, (a, b) in enumerate(pieces):
            wait("reduce-scatter", got[j])
            parts = []
            for src in range(world):
                if src == rank:
                    own_s = None if scales is None else scales[blocks(rank, a, b)]
                    parts.append(chunk_packet(packet, payload[values(rank, a, b)], own_s))
                else:
                    src_s = None if scales is None else recv_s[src][a:b]
                    parts.append(chunk_packet(packet, recv[src][a * unit : b * unit], src_s))
            mean = reduce_chunk(packet, parts, weights)
            mine_nbytes += mean.nbytes
            gathered[values(rank, a, b)] = mean.payload
            if mean.scales is not None:
                gathered_s[blocks(rank, a, b)] = mean.scales
            for p in peers:  # phase 2 sends: this piece of the mean to every peer
                sends.append(post(dist.isend, gathered[values(rank, a, b)], p, 4 * j + 2))
                if mean.scales is not None:
                    sends.append(post(dist.isend, gathered_s[blocks(rank, a, b)], p, 4 * j + 3))
            decode_into(out[values(rank, a, b)], mean)
            landed(values(rank, a, b))
        clock.mark("reduce_scatter")
        for j, (a, b) in enumerate(pieces):
            wait("all-gather", means[j])
            for p in peers:
                sl = values(p, a, b)
                decode_into(
                    out[sl],
                    chunk_packet(
                        packet,
                        gathered[sl],
                        None if scales is None else gathered_s[blocks(p, a, b)],
                    ),
                )
                landed(sl)
        wait("sends", sends)
        clock.mark("all_gather")
    except RuntimeError as exc:  # a peer failed mid-piece (gloo raises from isend/irecv too)
        _DROPPED[:] = [*_DROPPED[-(_KEEP_DROPPED - 1) :], posted]  # see _DROPPED
        if isinstance(exc, CollectiveError):
            raise
        raise CollectiveError(
            f"all-reduce failed ({exc}); a peer is gone or stalled: drop it from the round and "
            "re-form the group"
        ) from exc
    return out[: packet.numel].view(packet.shape), mine_nbytes
