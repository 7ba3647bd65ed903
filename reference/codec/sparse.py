"""The sparse wire format: per-chunk top-k of (update + residual), low-bit values, compact indices,
and the error-feedback residual a node carries to its next round.

One definition (:class:`SparseSpec` for the governed shape, :class:`SparsePacket` for the bytes):

    spec = SparseSpec(chunk=4096, k=64, bits=2)
    packet, residual = compress(update, residual, spec, beta=0.95)   # a node, every round
    mean = average_sparse(packets, weights=None)                     # every node, the ledger
    sparse_wire_bytes(numel, spec) == packet.nbytes

Layout of one packet of ``numel`` values (padded with zeros to ``chunks = ceil(numel / chunk)``
whole chunks): ``payload`` (uint8) is every chunk's ``k`` offsets within the chunk, ascending,
as 1 byte (chunk <= 256) or 2 bytes little-endian, then every chunk's ``k`` codes of ``bits``
bits packed little-endian (code j of a byte at bit ``bits * j``); ``scales`` (fp32) is one step
per chunk. Code ``c`` decodes to ``(c - L + 0.5) * step`` with ``L = 2**(bits - 1)``: the
levels ``+-0.5, +-1.5, ... +-(L - 0.5)`` steps (no zero; the values sent are the largest).

Encoding, per chunk, all in fp32, every operation its own kernel (deterministic on any machine
and any thread count):
    acc  = residual * beta + update                    (two kernels; NaN/Inf refused)
    keep = the k positions of largest |acc|; ties go to the lower offset (the key is
           ``bits(|acc|) * 2**16 + (2**16 - 1 - offset)``: unique, so the set does not depend on
           the top-k algorithm); padding past ``numel`` ranks below every real value
    amax = max |acc[keep]|;  if amax < 2**-100: step = 0, codes = L (decode to zero)
    else: step = amax / (L - 0.5);  c = clamp(floor(acc / step) + L, 0, 2L - 1)
    residual' = acc - decode(packet)

A peer's packet is an input: :meth:`SparsePacket.check` refuses wrong lengths, offsets outside
the chunk, duplicate or unordered offsets, and negative or non-finite steps.

As a wire format (``WireFormat.SPARSE``, ``TrainingConfig.wireFormat = 3``) the shape is
:data:`SPARSE_SPEC` and the error-feedback decay :data:`SPARSE_BETA`, one of each: a vote switches
the format, not its shape. The packet travels as a :class:`reference.codec.Packet` (``fmt`` SPARSE,
``block_size`` the chunk); :func:`encode_feedback` is what a node runs every round.
"""

from __future__ import annotations

import torch

from protocol.errors import ConfigError, TrainerError
from reference.codec.backend import resolve_backend
from reference.codec.formats import TINY_AMAX, Packet
from reference.codec.pure import nonfinite_error
from reference.codec.sparse_packet import (
    MAX_CHUNK,
    MIN_CHUNK,
    SPARSE_BETA,
    SPARSE_SPEC,
    VALUE_BITS,
    SparsePacket,
    SparseSpec,
    sparse_wire_bytes,
)
from reference.settings import WireFormat

__all__ = [  # the shape and the packet live in reference.codec.sparse_packet
    "MAX_CHUNK",
    "MIN_CHUNK",
    "SPARSE_BETA",
    "SPARSE_SPEC",
    "VALUE_BITS",
    "SparsePacket",
    "SparseSpec",
    "average_sparse",
    "compress",
    "decode_sparse",
    "encode_feedback",
    "encode_sparse",
    "index_overlap",
    "sparse_wire_bytes",
    "to_packet",
]

_KEY_SHIFT = 1 << 16


def _pack(offsets: torch.Tensor, codes: torch.Tensor, spec: SparseSpec) -> torch.Tensor:
    if spec.index_bytes == 1:
        idx = offsets.reshape(-1).to(torch.uint8)
    else:
        flat = offsets.reshape(-1)
        idx = torch.stack([flat & 255, flat >> 8], dim=1).reshape(-1).to(torch.uint8)
    per = 8 // spec.bits
    shifts = torch.arange(per, dtype=torch.int64) * spec.bits
    packed = (codes.reshape(-1, per) << shifts).sum(dim=1).to(torch.uint8)
    return torch.cat([idx, packed])


def _select_torch(x: torch.Tensor, spec: SparseSpec) -> tuple[torch.Tensor, ...]:
    """(offsets, codes, steps) of ``x`` by the rule in the module docstring, in eager torch."""
    n, chunks, c = x.numel(), spec.chunks(x.numel()), spec.chunk
    rows = torch.zeros(chunks * c, dtype=torch.float32)
    rows[:n] = x
    rows = rows.view(chunks, c)
    tie = (_KEY_SHIFT - 1) - torch.arange(c, dtype=torch.int64)
    key = rows.abs().view(torch.int32).to(torch.int64) * _KEY_SHIFT + tie
    if n < chunks * c:  # padding ranks below every real value (keys of real values are >= 0)
        key.view(-1)[n:] = key.view(-1)[n:] - (1 << 48)
    offsets = torch.topk(key, spec.k, dim=1, sorted=False).indices.sort(dim=1).values
    vals = torch.gather(rows, 1, offsets)
    amax = vals.abs().amax(dim=1)
    tiny = amax < TINY_AMAX
    levels = spec.levels
    half = torch.tensor(levels - 0.5, dtype=torch.float32)
    step = torch.where(tiny, torch.zeros_like(amax), amax / half)
    div = torch.where(tiny, torch.ones_like(amax), step)
    q = torch.floor(vals / div[:, None]).to(torch.int64) + levels
    q = q.clamp_(0, 2 * levels - 1)
    q[tiny] = levels
    return offsets, q, step


def encode_sparse(x: torch.Tensor, spec: SparseSpec, *, backend: str | None = None) -> SparsePacket:
    """The sparse packet (on the CPU, for the wire) of the flat fp32 vector ``x``.

    Backends as for the dense formats (``COLOCO_CODEC``): Triton for CUDA tensors (or CPU ones
    under ``TRITON_INTERPRET=1``), the native C kernel on CPU (reference.codec.native, a
    quickselect per chunk), eager torch otherwise; all give the same bytes."""
    if x.dtype != torch.float32 or x.dim() != 1:
        raise TrainerError(f"sparse encode needs a flat fp32 vector, got {x.dtype} {x.shape}")
    if x.numel() == 0:
        raise TrainerError("sparse encode needs at least one value")
    name = resolve_backend(x.device, backend)
    if name == "native":  # the same bits; NaN/Inf found in the same pass
        from reference.codec import native

        offsets, q, step = native.sparse_select(x.contiguous(), spec.chunk, spec.k, spec.levels)
        return SparsePacket(spec, x.numel(), _pack(offsets, q, spec), step)
    if not bool(torch.isfinite(x).all()):
        raise nonfinite_error("the pseudo-gradient plus residual")
    if name == "triton":
        from reference.codec import sparse_triton

        parts = sparse_triton.select(x.contiguous(), spec.chunk, spec.k, spec.levels)
        offsets, q, step = (t.cpu() for t in parts)
    else:
        offsets, q, step = _select_torch(x.detach().cpu(), spec)
    return SparsePacket(spec, x.numel(), _pack(offsets, q, spec), step)


def decode_sparse(packet: SparsePacket) -> torch.Tensor:
    """The dense fp32 vector of ``numel`` values a packet stands for (zeros off its positions)."""
    out = torch.zeros(packet.scales.numel() * packet.spec.chunk, dtype=torch.float32)
    out.view(-1)[packet.positions().view(-1)] = packet.values().view(-1)
    return out[: packet.numel]


def compress(
    update: torch.Tensor, residual: torch.Tensor | None, spec: SparseSpec, beta: float
) -> tuple[SparsePacket, torch.Tensor]:
    """One round of error feedback: ``acc = residual * beta + update``; the packet of ``acc``;
    the new residual ``acc - decode(packet)`` (the node's state for its next round)."""
    if not 0.0 <= beta <= 1.0:
        raise ConfigError(f"error-feedback decay beta must be in [0, 1], got {beta}")
    u = update.detach().float().reshape(-1).contiguous()
    if residual is None:
        acc = u.clone()
    else:
        if residual.shape != u.shape or residual.dtype != torch.float32:
            raise TrainerError(
                f"residual {residual.dtype} {tuple(residual.shape)} does not match the update's "
                f"{u.numel()} fp32 values: carry the residual of the same model"
            )
        acc = residual.mul(torch.tensor(beta, dtype=torch.float32))
        acc.add_(u)
    packet = encode_sparse(acc, spec)
    return packet, _sub_decoded(acc, packet)


def _sub_decoded(acc: torch.Tensor, packet: SparsePacket) -> torch.Tensor:
    """``acc - decode(packet)`` in place, at the kept positions only (elsewhere the decode is
    +0.0 and ``x - 0.0`` is ``x``): the same bits without a dense decode."""
    pos, vals = packet.positions().view(-1), packet.values().view(-1)
    real = pos < packet.numel
    pos, vals = pos[real], vals[real]
    acc[pos] = acc[pos] - vals
    return acc


def average_sparse(packets: list[SparsePacket], weights: list[int] | None = None) -> torch.Tensor:
    """The (token-weighted) mean of the packets' decodes, fp32, the same bits in any order.

    Packets are summed in the order of their :meth:`~SparsePacket.digest` (ties: identical bytes,
    then by weight), one fp32 add per value per packet (``sum(decode * w) / sum(w)``, the product
    and the sum separate kernels), so every node and the ledger get the same bits however the
    packets arrived."""
    if not packets:
        raise TrainerError("average_sparse needs at least one packet")
    first = packets[0]
    for i, p in enumerate(packets):
        if p.spec != first.spec or p.numel != first.numel:
            raise TrainerError(
                f"packet {i} is {p.spec} of {p.numel} values, packet 0 is {first.spec} of "
                f"{first.numel}: every member must send the governed format for the same model"
            )
    if weights is not None and (len(weights) != len(packets) or any(w <= 0 for w in weights)):
        raise TrainerError(f"{len(packets)} packets need as many positive weights, got {weights}")
    if len(packets) == 1:  # the mean of one packet is its decode: (v x w) / w rounds in fp32
        weights = None  # (a one-member round: the node decodes; 491 of 119,424 values differed)
    ws = weights if weights is not None else [1] * len(packets)
    order = sorted(range(len(packets)), key=lambda i: (packets[i].digest(), ws[i]))
    acc = torch.zeros(first.scales.numel() * first.spec.chunk, dtype=torch.float32)
    for i in order:
        vals = packets[i].values().view(-1)
        if weights is not None:
            vals = vals * torch.tensor(float(ws[i]), dtype=torch.float32)
        acc.index_add_(0, packets[i].positions().view(-1), vals)
    total = torch.tensor(float(sum(ws)), dtype=torch.float32)
    return acc[: first.numel].div_(total)


def to_packet(packet: SparsePacket, shape: tuple[int, ...] | None = None) -> Packet:
    """A :data:`SPARSE_SPEC` packet as the codec's :class:`Packet` (what the wire and the
    commitment carry)."""
    if packet.spec != SPARSE_SPEC:
        raise TrainerError(f"the sparse wire format is {SPARSE_SPEC}, this packet {packet.spec}")
    return Packet(WireFormat.SPARSE, shape or (packet.numel,), packet.payload, packet.scales,
                  SPARSE_SPEC.chunk)  # fmt: skip


def encode_feedback(
    base: torch.Tensor, local: torch.Tensor, residual: torch.Tensor | None
) -> tuple[Packet, torch.Tensor]:
    """A node's round in the sparse wire format: the packet of ``(base - local) + residual *
    SPARSE_BETA`` and the residual it carries to its next round (:func:`compress`)."""
    update = base.detach().float().reshape(-1) - local.detach().float().reshape(-1)
    packet, left = compress(update, residual, SPARSE_SPEC, SPARSE_BETA)
    return to_packet(packet), left


def index_overlap(a: SparsePacket, b: SparsePacket) -> float:
    """The share of ``a``'s kept positions that ``b`` kept too (symmetric: both keep ``k`` a
    chunk): the copy signal of the sparse format (ledger.judge.comparisons). Two packets of
    independent random choices share ``k / chunk`` of them."""
    if a.spec != b.spec or a.numel != b.numel:
        raise TrainerError(f"cannot compare a {a.spec} packet of {a.numel} values with a "
                           f"{b.spec} packet of {b.numel}")  # fmt: skip
    kept = torch.zeros(a.scales.numel() * a.spec.chunk, dtype=torch.bool)
    kept[a.positions().view(-1)] = True
    return float(kept[b.positions().view(-1)].sum()) / (a.scales.numel() * a.spec.k)
