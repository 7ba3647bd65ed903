"""Diagnostic top-k wires for bench.diloco_search: the codec's selection rule with other value
quantizers and other index codings, and their exact sizes, so a search can ask which shape of
the sparse format fits a bytes target at a given H before the codec implements it.

    spec = TopkSpec(chunk=1024, k=58, value_bits=1, coding="enum", scale_bits=16)
    spec.packet_bytes(numel)           # exact for "fixed" and "enum"; "rice" depends on the data
    spec = fit_k(spec, numel, inner_steps=25, workers=4, ratio=1000)   # the largest k that fits
    codec = TopkCodec(spec)            # patched into bench.diloco's sparse path (never the node)

Per chunk of ``chunk`` values (the last padded with zeros) the packet holds ``k`` positions,
``k`` values of ``value_bits`` bits and one scale of ``scale_bits`` bits, bit-packed:
- positions, by ``coding``: ``fixed`` the codec's whole bytes (1 byte a position when chunk <=
  256, else 2: today's ``SPARSE_SPEC``); ``enum`` the rank of the k-subset in the combinatorial
  number system, ``ceil(log2 C(chunk, k))`` bits a chunk (the least any fixed-length code can
  take); ``rice`` the gaps between ascending positions, Golomb-Rice coded with parameter
  ``r = floor(log2(chunk / k))`` (``(g >> r) + 1 + r`` bits a gap: variable length, measured);
- values: ``value_bits`` 2, 4 or 8 is the codec's quantizer (step ``amax / (L - 0.5)``, codes
  ``floor(x / step) + L``, levels ``+-0.5 .. +-(L - 0.5)`` steps); ``value_bits`` 1 is the sign
  times the chunk's mean |kept value| (the scale that minimises the squared error of a sign code);
- the scale: fp32 (32) or bf16 (16: the step is rounded to bf16 before it is used, so the decode
  is what a receiver of 16 bits computes).
The error feedback is the codec's (``acc = residual * beta + update``; ``residual' = acc -
decode``) and the mean is the plain mean of the decodes, as :func:`average_sparse` computes it
(``mean="count"``: each position divided by the number of packets that hold it instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from protocol.errors import ConfigError
from trainer.network.comm import wire_bytes

CODINGS = ("fixed", "enum", "rice")
MEANS = ("all", "count")


@dataclass(frozen=True)
class TopkSpec:
    chunk: int = 256
    k: int = 16
    value_bits: int = 2
    coding: str = "fixed"
    scale_bits: int = 32
    mean: str = "all"  # not the shape: how the receivers average (all packets, or senders)

    def __post_init__(self) -> None:
        if self.chunk < 2 or self.chunk & (self.chunk - 1):
            raise ConfigError(f"topk chunk must be a power of two >= 2, got {self.chunk}")
        if not 1 <= self.k <= self.chunk:
            raise ConfigError(f"topk k must be in [1, chunk={self.chunk}], got {self.k}")
        if self.value_bits not in (1, 2, 4, 8):
            raise ConfigError(f"topk value_bits must be 1, 2, 4 or 8, got {self.value_bits}")
        if self.coding not in CODINGS:
            raise ConfigError(f"topk coding must be one of {CODINGS}, got {self.coding!r}")
        if self.scale_bits not in (16, 32):
            raise ConfigError(f"topk scale_bits must be 16 (bf16) or 32, got {self.scale_bits}")
        if self.mean not in MEANS:
            raise ConfigError(f"topk mean must be one of {MEANS}, got {self.mean!r}")

    @property
    def rice_r(self) -> int:
        return max(0, math.floor(math.log2(self.chunk / self.k)))

    def index_bits(self) -> int:
        """Bits of one chunk's positions (``fixed`` and ``enum``; ``rice`` is measured)."""
        if self.coding == "fixed":
            return self.k * (8 if self.chunk <= 256 else 16)
        if self.coding == "enum":
            return (math.comb(self.chunk, self.k) - 1).bit_length()  # ranks 0 .. C - 1
        raise ConfigError("rice-coded positions have no fixed size: use packet_bits(offsets)")

    def packet_bytes(self, numel: int, index_bits: int | None = None) -> int:
        """Bytes of one packet of ``numel`` values (``index_bits``: the measured total of a
        rice-coded packet's positions)."""
        chunks = math.ceil(numel / self.chunk)
        idx = index_bits if index_bits is not None else chunks * self.index_bits()
        return math.ceil((idx + chunks * (self.k * self.value_bits + self.scale_bits)) / 8)

    def bits_per_param(self, numel: int) -> float:
        return 8 * self.packet_bytes(numel) / numel


def rice_bits(offsets: torch.Tensor, r: int) -> int:
    """Total Golomb-Rice bits of every chunk's ascending ``offsets`` (rows), coded as gaps."""
    gaps = torch.diff(offsets, dim=1, prepend=torch.full_like(offsets[:, :1], -1)) - 1
    return int(((gaps >> r) + 1 + r).sum())


def ratio_vs_sync(spec: TopkSpec, numel: int, inner_steps: int, workers: int) -> float:
    """bench.diloco's count: H fp32 ring all-reduces against K - 1 packets (a checked
    all-gather) a round, per rank."""
    sync = inner_steps * wire_bytes(numel, "fp32", workers)
    return sync / ((workers - 1) * spec.packet_bytes(numel))


def fit_k(spec: TopkSpec, numel: int, inner_steps: int, workers: int, ratio: float) -> TopkSpec:
    """``spec`` with the largest ``k`` whose packets are ``ratio`` x fewer bytes than
    synchronous training (``fixed`` or ``enum`` coding: exact sizes); a clear error if none."""
    if spec.coding == "rice":
        raise ConfigError("fit needs an exact size: use coding=enum or fixed")
    best = None
    for k in range(1, spec.chunk + 1):
        cand = replace(spec, k=k)
        if ratio_vs_sync(cand, numel, inner_steps, workers) < ratio:
            break
        best = cand
    if best is None:
        raise ConfigError(f"no k of {spec} fits {ratio}x fewer bytes than sync at H {inner_steps}")
    return best


@dataclass
class TopkPacket:
    values: torch.Tensor  # the dense decode (what every receiver computes)
    nbytes: int


@dataclass
class TopkCodec:
    """``compress``/``average`` with bench.diloco's sparse path's signatures (its ``spec``
    argument is ignored: this codec's shape is ``topk``)."""

    topk: TopkSpec

    def compress(
        self, update: torch.Tensor, residual: torch.Tensor | None, _spec: object, beta: float
    ) -> tuple[TopkPacket, torch.Tensor]:
        acc = update.detach().float().reshape(-1).clone()
        if residual is not None:
            acc = residual * beta + acc
        dec, nbytes = self.encode_decode(acc)
        return TopkPacket(dec, nbytes), acc - dec

    def encode_decode(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The decode of ``x``'s packet and the packet's bytes."""
        t, n = self.topk, x.numel()
        chunks = math.ceil(n / t.chunk)
        rows = torch.zeros(chunks * t.chunk)
        rows[:n] = x
        rows = rows.view(chunks, t.chunk)
        offsets = torch.topk(rows.abs(), t.k, dim=1).indices.sort(dim=1).values
        vals = torch.gather(rows, 1, offsets)
        if t.value_bits == 1:
            scale = self._round(vals.abs().mean(dim=1))
            dec = torch.where(vals >= 0, 1.0, -1.0) * scale[:, None]
        else:
            levels = 1 << (t.value_bits - 1)
            step = self._round(vals.abs().amax(dim=1) / (levels - 0.5))
            div = torch.where(step > 0, step, torch.ones_like(step))[:, None]
            q = (torch.floor(vals / div) + levels).clamp(0, 2 * levels - 1)
            dec = (q - levels + 0.5) * step[:, None]
        out = torch.zeros_like(rows).scatter_(1, offsets, dec)
        idx = rice_bits(offsets, t.rice_r) if t.coding == "rice" else None
        return out.view(-1)[:n].clone(), t.packet_bytes(n, idx)

    def _round(self, scale: torch.Tensor) -> torch.Tensor:
        return scale.to(torch.bfloat16).float() if self.topk.scale_bits == 16 else scale

    def average(self, packets: list[TopkPacket]) -> torch.Tensor:
        stacked = torch.stack([p.values for p in packets])
        if self.topk.mean == "all":
            return stacked.mean(dim=0)
        senders = (stacked != 0).sum(dim=0).clamp(min=1)
        return stacked.sum(dim=0) / senders
