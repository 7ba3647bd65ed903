"""Wire formats and the `Packet` that carries one encoded pseudo-gradient.

Formats match `TrainingConfig.wireFormat` on chain (0 fp32, 1 bf16, 2 int8, 3 sparse): `WireFormat`
is defined once, with the governed settings (reference.settings), and re-exported here. int8 stores
one fp32 absmax scale per block of `block_size` values (a power of two); the payload is padded
with zeros to a whole number of blocks. Every implementation (torch reference, native C, Triton)
produces bit-identical packets and bit-identical decodes, so ranks that run different backends
still agree.

Quantization rule (int8), per block of values `d` (the padded tail counts as zeros):
    amax  = max |d|                      (NaN/Inf anywhere is refused)
    if amax < 2**-100: scale = 0, q = 0  (see TINY_AMAX)
    else: scale = amax / 127, q = round_half_even(d * (127 / amax))   all in fp32, no FMA
Decode: `q * scale` in fp32. bf16 is round-to-nearest-even of the fp32 value.

A sparse packet (reference.codec.sparse) travels in the same `Packet`: `payload` its uint8 bytes
(offsets, then packed codes), `scales` its fp32 step per chunk, `block_size` the chunk of the one
governed shape (`SPARSE_SPEC`); it is checked as a `SparsePacket` on construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from protocol.errors import ConfigError, TrainerError
from reference.settings import WireFormat

if TYPE_CHECKING:
    from reference.codec.sparse_packet import SparsePacket

DEFAULT_BLOCK_SIZE = 256
MIN_BLOCK_SIZE = 32
MAX_BLOCK_SIZE = 4096
TINY_AMAX = 2.0**-100
"""Blocks whose absmax is below this encode as zeros. Above it, `127 / amax` cannot overflow and
a subnormal value times `127 / amax` is below 2**-19, so it rounds to 0 whether or not the device
flushes subnormals (GPUs may): all backends agree on every input."""


DENSE_FORMATS = (WireFormat.FP32, WireFormat.BF16, WireFormat.INT8)
"""The formats that send every value (one kernel each in pure, native and Triton); SPARSE is
reference.codec.sparse."""

PAYLOAD_DTYPE: dict[WireFormat, torch.dtype] = {
    WireFormat.FP32: torch.float32,
    WireFormat.BF16: torch.bfloat16,
    WireFormat.INT8: torch.int8,
    WireFormat.SPARSE: torch.uint8,
}
"""The dtype of a packet's payload in each format (int8: the codes; their scales are fp32)."""


def check_block_size(block_size: int) -> int:
    """Return `block_size` if it is a power of two in [32, 4096]; raise ConfigError otherwise."""
    if (
        not isinstance(block_size, int)
        or block_size < MIN_BLOCK_SIZE
        or block_size > MAX_BLOCK_SIZE
        or block_size & (block_size - 1)
    ):
        raise ConfigError(
            f"int8 block size must be a power of two between {MIN_BLOCK_SIZE} and "
            f"{MAX_BLOCK_SIZE}, got {block_size!r} (256 is the default)"
        )
    return block_size


def num_blocks(numel: int, block_size: int) -> int:
    return math.ceil(numel / block_size)


@dataclass(frozen=True, eq=False)
class Packet:
    """One encoded tensor (or flat buffer of many tensors) as it goes on the wire.

    `payload` is 1-D: fp32 or bf16 values (`numel` of them), or int8 codes padded to whole blocks.
    `scales` is the fp32 per-block scale vector for int8 and None otherwise. `shape` is the
    shape `decode` gives back.
    """

    fmt: WireFormat
    shape: tuple[int, ...]
    payload: torch.Tensor
    scales: torch.Tensor | None = None
    block_size: int = DEFAULT_BLOCK_SIZE

    def __post_init__(self) -> None:
        if self.payload.dtype != PAYLOAD_DTYPE[self.fmt] or self.payload.dim() != 1:
            raise TrainerError(
                f"{self.fmt.name} packet needs a 1-D {PAYLOAD_DTYPE[self.fmt]} payload, got "
                f"{self.payload.dim()}-D {self.payload.dtype}"
            )
        if self.fmt is WireFormat.SPARSE:
            self.sparse()  # the layout, offsets and steps checked (TrainerError naming the fault)
        elif self.fmt is WireFormat.INT8:
            blocks = num_blocks(self.numel, check_block_size(self.block_size))
            if self.scales is None or self.scales.dtype != torch.float32:
                raise TrainerError("an int8 packet needs fp32 per-block scales")
            if self.scales.numel() != blocks or self.payload.numel() != blocks * self.block_size:
                raise TrainerError(
                    f"int8 packet of {self.numel} values in blocks of {self.block_size} needs "
                    f"{blocks} scales and {blocks * self.block_size} codes, got "
                    f"{self.scales.numel()} and {self.payload.numel()}"
                )
        elif self.payload.numel() < self.numel:
            raise TrainerError(
                f"{self.fmt.name} packet of shape {self.shape} needs {self.numel} values, "
                f"payload has {self.payload.numel()}"
            )

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: payload plus scales."""
        n = self.payload.numel() * self.payload.element_size()
        if self.scales is not None:
            n += self.scales.numel() * self.scales.element_size()
        return n

    @property
    def device(self) -> torch.device:
        return self.payload.device

    def sparse(self) -> SparsePacket:
        """This packet as the sparse format's :class:`~reference.codec.sparse.SparsePacket`."""
        from reference.codec.sparse_packet import SPARSE_SPEC, SparsePacket

        if self.fmt is not WireFormat.SPARSE:
            raise TrainerError(f"a {self.fmt.name} packet is not a sparse one")
        if self.block_size != SPARSE_SPEC.chunk or self.scales is None:
            raise TrainerError(
                f"a sparse packet has chunks of {SPARSE_SPEC.chunk} values and fp32 steps "
                f"({SPARSE_SPEC}), got chunk {self.block_size} and steps {self.scales is not None}"
            )
        return SparsePacket(SPARSE_SPEC, self.numel, self.payload, self.scales)


def wire_bytes(
    numel: int, fmt: WireFormat | int | str, block_size: int = DEFAULT_BLOCK_SIZE
) -> int:
    """Bytes a packet of `numel` values takes on the wire in `fmt` (payload + scales)."""
    fmt = WireFormat.parse(fmt)
    if fmt is WireFormat.SPARSE:
        from reference.codec.sparse_packet import SPARSE_SPEC, sparse_wire_bytes

        return sparse_wire_bytes(numel, SPARSE_SPEC)
    if fmt is WireFormat.INT8:
        blocks = num_blocks(numel, check_block_size(block_size))
        return blocks * block_size + 4 * blocks
    return numel * (4 if fmt is WireFormat.FP32 else 2)
