"""Wire codec for DiLoCo pseudo-gradients: fp32, bf16 and block-wise int8.

API the DiLoCo loop calls (all tensors fp32; `fmt` is a `WireFormat`, its chain number
0/1/2 from `TrainingConfig.wireFormat`, or "fp32"/"bf16"/"int8"):

    from reference.codec import WireFormat, encode, encode_flat, decode, unflatten
    from reference.mean import simulate_average
    # and, in the node, average from trainer.network.allreduce

    packet = encode_flat(base_params, local_params, fmt)        # base - local, fused, one packet
    mean, bytes_sent = average(packet, group, timeout=60.0)     # flat fp32 mean, same on all ranks
    for p, g in zip(params, unflatten(mean, params)): ...       # per-parameter views

    encode(base, local, fmt, *, block_size=256) -> Packet       # one tensor, base - local
    quantize(x, fmt, *, block_size=256) -> Packet               # x itself
    decode(packet) -> Tensor                                    # fp32, packet.shape
    decode_into(out, packet, *, accumulate=False) -> Tensor     # into a preallocated buffer
    average(x_or_packet, group=None, fmt=None, timeout=60.0, *, block_size=256)
        -> (mean: Tensor, bytes_sent: int)                      # raises CollectiveError
    simulate_average(vectors, fmt) -> Tensor                    # same bits, one process
    Packet.nbytes                                               # payload + scales on the wire
    wire_bytes(numel, fmt, block_size=256) -> int               # same, without encoding
    measure_codec_ns_per_param() -> float                       # in reference.codec.speed

Backends (bit-identical): Triton on CUDA tensors, native C kernels on CPU (built once with the
machine's cc, cached), pure torch otherwise; `COLOCO_CODEC=torch|native|triton` overrides.
"""

from reference.codec.backend import resolve_backend
from reference.codec.dispatch import (
    decode,
    decode_into,
    encode,
    encode_flat,
    flatten,
    quantize,
    unflatten,
)
from reference.codec.formats import DEFAULT_BLOCK_SIZE, Packet, wire_bytes
from reference.settings import WireFormat

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Packet",
    "WireFormat",
    "decode",
    "decode_into",
    "encode",
    "encode_flat",
    "flatten",
    "quantize",
    "resolve_backend",
    "unflatten",
    "wire_bytes",
]
