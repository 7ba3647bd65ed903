"""The all-reduce's arithmetic in one process: chunking, the per-chunk reduction, the mean.

:func:`trainer.network.allreduce.average` runs these same functions across ranks (rank r reduces
chunk r); :func:`simulate_average` runs them for every chunk here, so the ledger's outer step, the
replay audit and the benchmarks get the mean every rank holds, bit for bit.

The sparse format (reference.codec.sparse) is not chunked nor re-encoded: :func:`sparse_mean`
sums every packet in the order of their digests.

A chunk is ``k`` whole units (one int8 block, or one fp32/bf16 value): ``chunking`` cuts the
packet into ``world`` equal chunks, the last one padded with zeros. ``reduce_chunk`` decodes the
ranks' copies of one chunk, sums them in rank order (token-weighted: each product and each sum its
own fp32 kernel, no fused multiply-add) and re-encodes the mean in the packet's wire format.
"""

from __future__ import annotations

import math

import torch

from protocol.errors import TrainerError
from reference.codec import Packet, WireFormat, decode_into, quantize
from reference.codec.formats import DEFAULT_BLOCK_SIZE


def zero_pad(t: torch.Tensor, length: int) -> torch.Tensor:
    if t.numel() == length:
        return t
    out = torch.zeros(length, dtype=t.dtype, device=t.device)
    out[: t.numel()] = t
    return out


def unit_of(packet: Packet) -> int:
    return packet.block_size if packet.fmt is WireFormat.INT8 else 1


def chunking(packet: Packet, world: int) -> tuple[int, int]:
    """(units per chunk, values per chunk); a unit is one int8 block or one fp32/bf16 value."""
    unit = unit_of(packet)
    k = math.ceil(math.ceil(packet.numel / unit) / world)
    return k, k * unit


def chunk_packet(packet: Packet, payload: torch.Tensor, scales: torch.Tensor | None) -> Packet:
    return Packet(packet.fmt, (payload.numel(),), payload, scales, packet.block_size)


def reduce_chunk(packet: Packet, parts: list[Packet], weights: list[int] | None) -> Packet:
    """Decode the ranks' copies of one chunk (``parts``, in rank order), sum them in rank order,
    divide, re-encode. Block-local, so any block-aligned piece gives the bits of the whole chunk.

    With `weights`: ``sum(decode(src) * w_src) / sum(w)``, each operation its own kernel."""
    n = parts[0].numel
    acc = torch.zeros(n, dtype=torch.float32, device=parts[0].device)
    if weights is not None:
        tmp = torch.empty_like(acc)
        for part, w in zip(parts, weights, strict=True):
            decode_into(tmp, part)
            tmp.mul_(torch.tensor(float(w), dtype=torch.float32, device=acc.device))
            acc.add_(tmp)
        total = torch.tensor(float(sum(weights)), dtype=torch.float32, device=acc.device)
        return quantize(acc.div_(total), packet.fmt, block_size=packet.block_size)
    for part in parts:
        decode_into(acc, part, accumulate=True)
    acc.div_(len(parts))
    return quantize(acc, packet.fmt, block_size=packet.block_size)


def decode_gathered(
    packet: Packet, payload: torch.Tensor, scales: torch.Tensor | None, total: int
) -> torch.Tensor:
    full = Packet(packet.fmt, (total,), payload, scales, packet.block_size)
    flat = decode_into(torch.empty(total, device=payload.device), full)
    return flat[: packet.numel].reshape(packet.shape).clone()


def sparse_mean(packets: list[Packet], weights: list[int] | None) -> torch.Tensor:
    """The mean of sparse packets (reference.codec.sparse.average_sparse: summed in the order of
    their digests, no re-encoding), shaped like the first: what every rank of the checked
    all-gather and the ledger hold, bit for bit."""
    from reference.codec.sparse import average_sparse

    bad = [i for i, p in enumerate(packets) if p.fmt is not WireFormat.SPARSE]
    if bad:
        raise TrainerError(
            f"packets {bad} are not sparse: every member must send the round's wire format"
        )
    flat = average_sparse([p.sparse() for p in packets], weights)
    return flat.reshape(packets[0].shape)


def simulate_average(
    vectors: list[torch.Tensor] | list[Packet],
    fmt: WireFormat | int | str,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    weights: list[int] | None = None,
) -> torch.Tensor:
    """What `average` returns when rank r holds `vectors[r]` (and passed `weights[r]`),
    computed in one process. `vectors` may also be the ranks' packets (the ledger's audit
    replays the committed int8 encodings).

    Bit-identical to the distributed result (same chunks, same order, same kernels); for
    benchmarks, accuracy tests and the ledger's replay.
    """
    if not vectors:
        raise TrainerError("simulate_average needs at least one vector")
    packets = [
        v if isinstance(v, Packet) else quantize(v.float().contiguous(), fmt, block_size=block_size)
        for v in vectors
    ]
    if weights is not None and len(weights) != len(packets):
        raise TrainerError(f"{len(packets)} vectors but {len(weights)} weights")
    world = len(packets)
    first = packets[0]
    if WireFormat.parse(fmt) is WireFormat.SPARSE or first.fmt is WireFormat.SPARSE:
        return sparse_mean(packets, weights)
    if world == 1:
        return decode_into(torch.empty(first.shape, device=first.device), first)
    k, chunk = chunking(first, world)
    padded = [zero_pad(p.payload, world * chunk) for p in packets]
    padded_scales = [None if p.scales is None else zero_pad(p.scales, world * k) for p in packets]
    means = []
    for r in range(world):
        parts = [
            chunk_packet(
                first,
                pl[r * chunk : (r + 1) * chunk],
                None if sc is None else sc[r * k : (r + 1) * k],
            )
            for pl, sc in zip(padded, padded_scales, strict=True)
        ]
        means.append(reduce_chunk(first, parts, weights))
    gathered = torch.cat([m.payload for m in means])
    gathered_scales = None
    if first.scales is not None:
        gathered_scales = torch.cat([m.scales for m in means if m.scales is not None])
    return decode_gathered(first, gathered, gathered_scales, world * chunk)
