"""The sparse wire format's shape and bytes: :class:`SparseSpec` (the governed shape),
:data:`SPARSE_SPEC` and :data:`SPARSE_BETA` (the protocol's), :func:`sparse_wire_bytes` and
:class:`SparsePacket` (one packet, checked on construction: a peer's packet is untrusted input).

The layout and the encoding are described in :mod:`reference.codec.sparse`, which compresses and
averages; this module holds only what the codec's packet and its byte counts need, so that
:mod:`reference.codec.formats` can name a sparse packet without importing the compressor.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from protocol.errors import ConfigError, TrainerError

MIN_CHUNK = 64
MAX_CHUNK = 65536
VALUE_BITS = (2, 4, 8)


@dataclass(frozen=True)
class SparseSpec:
    """The sparse format's shape: ``k`` of every ``chunk`` values, ``bits`` bits each."""

    chunk: int = 4096
    k: int = 64
    bits: int = 2

    def __post_init__(self) -> None:
        c, k, b = self.chunk, self.k, self.bits
        if not isinstance(c, int) or c < MIN_CHUNK or c > MAX_CHUNK or c & (c - 1):
            raise ConfigError(
                f"sparse chunk must be a power of two between {MIN_CHUNK} and {MAX_CHUNK}, "
                f"got {c!r} (4096 is the default)"
            )
        if b not in VALUE_BITS:
            raise ConfigError(f"sparse value bits must be one of {VALUE_BITS}, got {b!r}")
        if not isinstance(k, int) or not 1 <= k <= c or (k * b) % 8:
            raise ConfigError(
                f"sparse k must be in [1, chunk={c}] with k * bits a whole number of bytes "
                f"(a multiple of {8 // math.gcd(8, b)} at {b} bits), got {k!r}"
            )

    @property
    def index_bytes(self) -> int:
        return 1 if self.chunk <= 256 else 2

    @property
    def levels(self) -> int:
        """L: codes are 0 .. 2L - 1, decoding to (c - L + 0.5) steps."""
        return 1 << (self.bits - 1)

    def chunks(self, numel: int) -> int:
        return math.ceil(numel / self.chunk)

    def payload_bytes(self, numel: int) -> int:
        return self.chunks(numel) * self.k * (self.index_bytes * 8 + self.bits) // 8

    @property
    def density(self) -> float:
        return self.k / self.chunk


SPARSE_SPEC = SparseSpec(chunk=256, k=16, bits=2)
"""The wire format's shape: 16 of every 256 values (6.25 %), 2 bits each, 1-byte offsets: 24
bytes a chunk, 10.8x fewer than int8's packet (docs/codec.md, the best loss measured)."""

SPARSE_BETA = 0.95
"""The error-feedback decay: ``acc = residual * SPARSE_BETA + update``."""


def sparse_wire_bytes(numel: int, spec: SparseSpec) -> int:
    """Bytes of one sparse packet of ``numel`` values: offsets + codes + one fp32 step a chunk."""
    return spec.payload_bytes(numel) + 4 * spec.chunks(numel)


@dataclass(frozen=True, eq=False)
class SparsePacket:
    """One node's sparse pseudo-gradient as it goes on the wire (checked on construction)."""

    spec: SparseSpec
    numel: int
    payload: torch.Tensor  # uint8: offsets, then packed codes
    scales: torch.Tensor  # fp32: one step per chunk

    def __post_init__(self) -> None:
        self.check()

    @property
    def nbytes(self) -> int:
        return self.payload.numel() + 4 * self.scales.numel()

    def check(self) -> None:
        """Refuse a malformed packet with what is wrong (a peer's packet is untrusted input)."""
        s, n = self.spec, self.numel
        if not isinstance(n, int) or n < 1:
            raise TrainerError(f"sparse packet must hold at least one value, got numel={n!r}")
        want = s.payload_bytes(n)
        p, sc = self.payload, self.scales
        if p.dtype != torch.uint8 or p.dim() != 1 or p.numel() != want:
            raise TrainerError(
                f"sparse packet of {n} values ({s}) needs a 1-D uint8 payload of {want} bytes, "
                f"got {p.dim()}-D {p.dtype} of {p.numel()}: the sender used another spec "
                "or the packet was cut"
            )
        if sc.dtype != torch.float32 or sc.dim() != 1 or sc.numel() != s.chunks(n):
            raise TrainerError(
                f"sparse packet of {n} values ({s}) needs {s.chunks(n)} fp32 steps, got "
                f"{sc.dim()}-D {sc.dtype} of {sc.numel()}"
            )
        if not bool(torch.isfinite(sc).all()) or bool((sc < 0).any()):
            raise TrainerError("sparse packet has a negative, NaN or Inf step: refused")
        offs = self.offsets()
        if bool((offs >= s.chunk).any()):
            raise TrainerError(
                f"sparse packet has an offset >= chunk size {s.chunk}: refused (offsets must "
                "lie within their chunk)"
            )
        if s.k > 1 and not bool((offs[:, 1:] > offs[:, :-1]).all()):
            raise TrainerError(
                "sparse packet has duplicate or unordered offsets within a chunk: refused "
                "(each chunk lists k distinct offsets in ascending order)"
            )

    def offsets(self) -> torch.Tensor:
        """The (chunks, k) int64 offsets within each chunk."""
        s = self.spec
        m = self.scales.numel() * s.k
        raw = self.payload[: m * s.index_bytes].to(torch.int64)
        if s.index_bytes == 1:
            return raw.view(-1, s.k)
        pairs = raw.view(m, 2)
        return (pairs[:, 0] + pairs[:, 1] * 256).view(-1, s.k)

    def codes(self) -> torch.Tensor:
        """The (chunks, k) int64 codes."""
        s = self.spec
        m = self.scales.numel() * s.k
        packed = self.payload[m * s.index_bytes :].to(torch.int64)
        per = 8 // s.bits
        shifts = torch.arange(per, dtype=torch.int64) * s.bits
        return ((packed[:, None] >> shifts) & ((1 << s.bits) - 1)).reshape(-1, s.k)

    def values(self) -> torch.Tensor:
        """The (chunks, k) fp32 values: ``(c - L + 0.5) * step``, one multiply each."""
        half_levels = (self.codes() - self.spec.levels).to(torch.float32) + 0.5
        return half_levels * self.scales[:, None]

    def positions(self) -> torch.Tensor:
        """The (chunks, k) flat positions (positions >= numel, in the padding, carry nothing)."""
        base = torch.arange(self.scales.numel(), dtype=torch.int64)[:, None] * self.spec.chunk
        return base + self.offsets()

    def digest(self) -> bytes:
        """sha256 of the wire bytes (the order :func:`average_sparse` sums packets in)."""
        h = hashlib.sha256(self.payload.numpy().tobytes())
        h.update(self.scales.numpy().tobytes())
        return h.digest()
