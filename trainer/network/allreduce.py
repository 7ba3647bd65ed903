"""Quantized all-reduce of a pseudo-gradient that trusts nobody's arithmetic: every rank
receives every peer's whole packet, checks it against what that peer committed to, and computes
the mean itself; every rank ends with the same, bit for bit, mean.

Algorithm (all formats):

1. Every rank sends its encoded packet (int8 codes + fp32 scales, or bf16, or fp32) to every
   peer, in block-aligned pieces, point to point (gloo) or as two ``all_gather`` (NCCL).
2. ``check(src, packet, weight)`` (the node passes one that compares the packet's commitment
   hash and the weight with those ``src`` signed before the exchange, trainer.round.commits)
   runs on every peer's packet before any value of the mean leaves :func:`average`; a packet
   that fails it raises, naming the peer, and nothing of it is used.
   The sparse format (trainer.network.sparse_gather) also refuses, naming the peer, a packet
   whose offsets are malformed, before its commitment is checked.
3. Every rank sums the decoded packets in fp32 in rank order (token-weighted, each product and
   sum its own kernel, no fused multiply-add), divides, and re-encodes the mean in the wire format
   (fresh block scales) and decodes it: the bits of :func:`reference.mean.simulate_average`,
   which is what the ledger recomputes from the members' committed packets. Sparse packets are
   summed in the order of their digests and not re-encoded (:func:`reference.mean.sparse_mean`).

Why not a reduce-scatter (rank r reduces chunk r for everybody, then all-gathers the means, 2
(world-1)/world packets per rank on the wire): nobody can check a mean piece, so one rank that
sends its peers a wrong mean and keeps the true one for itself moves every honest member off the
ledger's result while its own matches it (security review F6). The all-gather costs (world-1)
packets per rank, the same at 2 ranks and world/2 times more above, for a mean every rank computed
from checked inputs. A compressed wire format shrinks the packet, not the trust.

Weighted mean (heterogeneous nodes): with ``weight=`` (this rank's tokens of the round) the ranks
first all-gather their weights (8 bytes each), so a node that ran fewer inner steps counts for
less, as the ledger pays by tokens.

`bytes_sent` counts what this rank puts on the wire: its packet once to each peer, plus the
weights; transport headers are not counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist

from protocol.errors import CollectiveError, TrainerError
from reference.codec import Packet, WireFormat, decode_into, quantize
from reference.codec.formats import DEFAULT_BLOCK_SIZE
from reference.mean import chunk_packet, reduce_chunk, unit_of, zero_pad
from trainer.network.collective import Check, Clock, as_timedelta, run_collective
from trainer.network.coordination.heartbeat import is_watching

log = logging.getLogger(__name__)

PIECE_BYTES = 1 << 19
"""Bytes of payload per point-to-point piece of the pipelined exchange (512 KiB)."""


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
    check: Check | None = None,
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
    overlaps the wire; the ranges cover ``[0, numel)`` exactly once. With ``check`` every peer's
    packet is checked before any value of the mean is handed over (then ``on_piece`` is called
    once, after the checks).
    """
    if not dist.is_available() or not dist.is_initialized():
        raise TrainerError("torch.distributed is not initialized: call init_process_group first")
    wait_for = as_timedelta(timeout)
    packet = _to_packet(x, fmt, block_size)
    world = dist.get_world_size(group)
    if world == 1:
        mean = decode_into(torch.empty(packet.shape, device=packet.device), packet)
        if on_piece is not None:
            on_piece(0, packet.numel, mean.view(-1))
        return mean, 0
    rank = dist.get_rank(group)
    device = packet.device
    clock = Clock(timings)
    weights = None
    if weight is not None:
        weights = _gather_weights(weight, group, wait_for, device)
    clock.mark("weights")

    if pipelined is None:  # on gloo, watched or not (the watch polls a waiter thread, _Waited)
        pipelined = dist.get_backend(group) == "gloo"
    if packet.fmt is WireFormat.SPARSE:  # whole packets, parsed and checked, then averaged here
        from trainer.network.sparse_gather import gather_sparse

        mean, nbytes = gather_sparse(packet, group, wait_for=wait_for, weights=weights,
                                     world=world, rank=rank, clock=clock, check=check)  # fmt: skip
        if on_piece is not None:
            on_piece(0, packet.numel, mean.view(-1))
    elif pipelined:
        mean, nbytes = _pipelined(packet, group, wait_for=wait_for, weights=weights,
                                  world=world, rank=rank, clock=clock, check=check,
                                  on_piece=on_piece)  # fmt: skip
    else:
        mean, nbytes = _collectives(packet, group, wait_for=wait_for, weights=weights,
                                    world=world, rank=rank, clock=clock, check=check)  # fmt: skip
        if on_piece is not None:
            on_piece(0, packet.numel, mean.view(-1))
    bytes_sent = (world - 1) * nbytes + (8 * (world - 1) if weights else 0)
    log.debug(
        "rank %d averaged %d values as %s: %d bytes sent",
        rank,
        packet.numel,
        packet.fmt.name,
        bytes_sent,
    )
    return mean, bytes_sent


def _gather_weights(
    weight: int, group: dist.ProcessGroup | None, timeout: timedelta, device: torch.device
) -> list[int]:
    if weight <= 0:
        raise TrainerError(f"all-reduce weight must be positive, got {weight}")
    world = dist.get_world_size(group)
    mine = torch.tensor([int(weight)], dtype=torch.int64, device=device)
    out = torch.empty(world, dtype=torch.int64, device=device)
    run_collective(
        "all_gather (weights)",
        timeout,
        partial(dist.all_gather_single, out, mine, group=group, async_op=True),
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
    clock: Clock,
    check: Check | None,
) -> tuple[torch.Tensor, int]:
    """All-gather every rank's whole packet in two collectives (payload, scales: NCCL), check
    them, then reduce every chunk here."""
    device = packet.device
    payload = packet.payload.contiguous()
    gathered = torch.empty(world * payload.numel(), dtype=payload.dtype, device=device)
    run_collective(
        "all_gather",
        wait_for,
        partial(dist.all_gather_single, gathered, payload, group=group, async_op=True),
    )
    gathered_s = None
    if packet.scales is not None:
        scales = packet.scales.contiguous()
        gathered_s = torch.empty(world * scales.numel(), dtype=torch.float32, device=device)
        run_collective(
            "all_gather (scales)",
            wait_for,
            partial(dist.all_gather_single, gathered_s, scales, group=group, async_op=True),
        )
    clock.mark("exchange")
    packets = [_packet_from(packet, gathered, gathered_s, src) for src in range(world)]
    _check_all(packets, weights, rank, check)
    clock.mark("check")
    out = torch.empty(_units(packet) * unit_of(packet), dtype=torch.float32, device=device)
    _reduce_range(packet, packets, weights, out, (0, _units(packet)))
    clock.mark("reduce")
    return out[: packet.numel].view(packet.shape), packet.nbytes


def _units(packet: Packet) -> int:
    """Units of the packet (int8 blocks, else values): the exchange's block-aligned grid."""
    return -(-packet.numel // unit_of(packet))


def _packet_from(
    like: Packet, payload: torch.Tensor, scales: torch.Tensor | None, src: int
) -> Packet:
    """Rank ``src``'s packet out of the gathered buffers (every packet has ``like``'s layout)."""
    n, m = like.payload.numel(), 0 if like.scales is None else like.scales.numel()
    own_scales = None if scales is None else scales[src * m : (src + 1) * m]
    return Packet(like.fmt, like.shape, payload[src * n : (src + 1) * n], own_scales,
                  like.block_size)  # fmt: skip


def _check_all(
    packets: list[Packet], weights: list[int] | None, rank: int, check: Check | None
) -> None:
    """Every peer's packet and weight against what it committed to, before the mean is used."""
    if check is None:
        return
    for src, p in enumerate(packets):
        if src != rank:
            check(src, p, None if weights is None else weights[src])


def _reduce_range(
    like: Packet,
    packets: list[Packet],
    weights: list[int] | None,
    out: torch.Tensor,
    units: tuple[int, int],
) -> None:
    """The mean of units [a, b) of every packet, re-encoded and decoded into ``out``: the bits of
    :func:`reference.mean.simulate_average` (the re-encoding is block-local)."""
    a, b = units
    unit = unit_of(like)
    end = min(b * unit, like.numel)
    if a * unit >= end:
        return
    parts = [
        chunk_packet(
            like,
            zero_pad(p.payload[a * unit : b * unit], (b - a) * unit),
            None if p.scales is None else p.scales[a:b],
        )
        for p in packets
    ]
    mean = reduce_chunk(like, parts, weights)
    decode_into(out[a * unit : b * unit], mean)


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
    """Block-aligned [start, end) unit ranges of ``k`` units, ~PIECE_BYTES of payload each."""
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
    clock: Clock,
    check: Check | None,
    on_piece: Callable[[int, int, torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, int]:
    """The same all-gather, point to point in pieces of ~PIECE_BYTES: every receive and send is
    posted at once and each piece of the mean is reduced as soon as every rank's copy of it has
    landed, so the link stays busy while the CPU works; same bits as :func:`_collectives`.
    Without ``check`` each piece of the mean goes to ``on_piece`` as soon as it is final; with it,
    only once every peer's whole packet has passed its check."""
    units = _units(packet)
    unit = unit_of(packet)
    device = packet.device
    payload, scales = packet.payload.contiguous(), packet.scales
    peers = [p for p in range(world) if p != rank]
    peer_rank = {p: p if group is None else dist.get_global_rank(group, p) for p in peers}
    pieces = _pieces(packet, units)
    n_values = payload.numel()

    def values(a: int, b: int) -> slice:  # piece [a, b) of a packet's payload
        return slice(a * unit, min(b * unit, n_values))

    def post(op: Callable[..., dist.Work | None], t: torch.Tensor, p: int, tag: int) -> dist.Work:
        work = op(t, peer_rank[p], group=group, tag=tag)
        if work is None:
            raise CollectiveError("all-reduce: torch.distributed returned no work handle")
        return work

    watched = is_watching()  # the heartbeat watch polls: wait in a thread it can poll

    def wait(phase: str, works: list[dist.Work]) -> None:
        if watched:
            run_collective(phase, wait_for, partial(_Waited, works, wait_for))
            return
        for work in works:
            run_collective(phase, wait_for, partial(_same, work))

    posted: list[list[list[dist.Work]]] = []  # every work posted, kept if the exchange fails
    try:
        gathered = torch.empty(world * n_values, dtype=payload.dtype, device=device)
        gathered[rank * n_values : (rank + 1) * n_values] = payload
        gathered_s = None
        if scales is not None:
            gathered_s = torch.empty(world * scales.numel(), dtype=torch.float32, device=device)
            gathered_s[rank * scales.numel() : (rank + 1) * scales.numel()] = scales
        packets = [_packet_from(packet, gathered, gathered_s, src) for src in range(world)]
        got: list[list[dist.Work]] = [[] for _ in pieces]
        posted.append(got)
        sends: list[dist.Work] = []
        posted.append([sends])
        for j, (a, b) in enumerate(pieces):
            for p in peers:
                got[j].append(post(dist.irecv, packets[p].payload[values(a, b)], p, 2 * j))
                peer_scales = packets[p].scales
                if peer_scales is not None:
                    got[j].append(post(dist.irecv, peer_scales[a:b], p, 2 * j + 1))
        for j, (a, b) in enumerate(pieces):
            for p in peers:
                sends.append(post(dist.isend, payload[values(a, b)], p, 2 * j))
                if scales is not None:
                    sends.append(post(dist.isend, scales[a:b], p, 2 * j + 1))
        out = torch.empty(units * unit, dtype=torch.float32, device=device)
        for j, (a, b) in enumerate(pieces):
            wait("exchange", got[j])
            _reduce_range(packet, packets, weights, out, (a, b))
            end = min(b * unit, packet.numel)
            if check is None and on_piece is not None and a * unit < end:
                on_piece(a * unit, end, out[a * unit : end])
        wait("sends", sends)
        clock.mark("exchange")
        _check_all(packets, weights, rank, check)
        clock.mark("check")
        if check is not None and on_piece is not None:
            on_piece(0, packet.numel, out[: packet.numel])
    except RuntimeError as exc:  # a peer failed mid-piece (gloo raises from isend/irecv too)
        _DROPPED[:] = [*_DROPPED[-(_KEEP_DROPPED - 1) :], posted]  # see _DROPPED
        if isinstance(exc, CollectiveError):
            raise
        raise CollectiveError(
            f"all-reduce failed ({exc}); a peer is gone or stalled: drop it from the round and "
            "re-form the group"
        ) from exc
    return out[: packet.numel].view(packet.shape), packet.nbytes
