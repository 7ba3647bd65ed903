"""Triton codec kernels vs the torch reference on a GPU, and vs the GPU's copy bandwidth.

    python -m bench.codec_gpu [--numel N]

Without CUDA the last line is `{"skipped": "no CUDA device"}`. With CUDA, for each format and
backend: encode (fused base - local) and decode times (CUDA events, median of 20), the bytes each
moves (encode reads 8 B/param and writes the packet; decode reads the packet and writes 4 B/param),
the achieved GB/s, and that figure as a fraction of a device-to-device copy's GB/s (the practical
memory-bandwidth ceiling). It also checks that Triton's packets equal the torch reference's bit
for bit on the device, and the same for the sparse format's Triton kernel (against the torch
reference on the CPU; its encode time includes packing the packet on the host).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections.abc import Callable
from functools import partial

import torch

from reference.codec import decode, decode_into, encode
from reference.codec.formats import DENSE_FORMATS

log = logging.getLogger("bench.codec_gpu")


def _median_ms(fn: Callable[[], object], iters: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def run(numel: int) -> dict[str, object]:
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    base = torch.randn(numel, device=dev, generator=gen)
    local = base + 0.01 * torch.randn(numel, device=dev, generator=gen)
    out = torch.empty(numel, device=dev)
    copy_ms = _median_ms(lambda: out.copy_(base))
    copy_gbps = 8 * numel / copy_ms / 1e6
    result: dict[str, object] = {
        "device": torch.cuda.get_device_name(dev),
        "numel": numel,
        "copy_gbps": round(copy_gbps, 1),
    }
    for fmt in DENSE_FORMATS:  # the sparse kernel is checked on its own below
        name = fmt.name.lower()
        packets = {}
        for backend in ("triton", "torch"):
            packet = encode(base, local, fmt, backend=backend)
            packets[backend] = packet
            enc_ms = _median_ms(partial(encode, base, local, fmt, backend=backend))
            dec_ms = _median_ms(partial(decode_into, out, packet, backend=backend))
            enc_gbps = (8 * numel + packet.nbytes) / enc_ms / 1e6
            dec_gbps = (packet.nbytes + 4 * numel) / dec_ms / 1e6
            key = f"{backend}_{name}"
            result[f"{key}_encode_ms"] = round(enc_ms, 4)
            result[f"{key}_decode_ms"] = round(dec_ms, 4)
            result[f"{key}_encode_gbps"] = round(enc_gbps, 1)
            result[f"{key}_decode_gbps"] = round(dec_gbps, 1)
            result[f"{key}_encode_frac_of_copy"] = round(enc_gbps / copy_gbps, 3)
            result[f"{key}_decode_frac_of_copy"] = round(dec_gbps / copy_gbps, 3)
            result[f"{key}_ns_per_param"] = round((enc_ms + dec_ms) * 1e6 / numel, 4)
            log.info(
                "%s: encode %.3f ms (%.0f GB/s), decode %.3f ms (%.0f GB/s)",
                key,
                enc_ms,
                enc_gbps,
                dec_ms,
                dec_gbps,
            )
        tri, ref = packets["triton"], packets["torch"]
        same = _same_bits(tri.payload, ref.payload)
        if tri.scales is not None and ref.scales is not None:
            same = same and torch.equal(tri.scales, ref.scales)
        same = same and torch.equal(decode(tri, backend="triton"), decode(ref, backend="torch"))
        result[f"{name}_triton_bit_exact_vs_torch"] = same
        result[f"{name}_triton_speedup_vs_torch"] = round(
            float(result[f"torch_{name}_ns_per_param"])  # type: ignore[arg-type]
            / float(result[f"triton_{name}_ns_per_param"]),  # type: ignore[arg-type]
            2,
        )
    result |= sparse(base - local)
    return result


def sparse(x: torch.Tensor) -> dict[str, object]:
    """The sparse format (default shape): the Triton selection kernel on the device against the
    torch reference (run on the CPU), bit for bit, and its encode time."""
    from reference.codec.sparse import SparseSpec, encode_sparse

    spec = SparseSpec()
    tri = encode_sparse(x, spec, backend="triton")
    ref = encode_sparse(x.cpu(), spec, backend="torch")
    enc_ms = _median_ms(partial(encode_sparse, x, spec, backend="triton"))
    log.info("triton_sparse: encode %.3f ms", enc_ms)
    return {
        "sparse_spec": [spec.chunk, spec.k, spec.bits],
        "sparse_triton_bit_exact_vs_torch": torch.equal(tri.payload, ref.payload)
        and _same_bits(tri.scales, ref.scales),
        "triton_sparse_encode_ms": round(enc_ms, 4),
        "triton_sparse_encode_ns_per_param": round(enc_ms * 1e6 / x.numel(), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1 << 26, help="parameters per tensor")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    print(json.dumps(run(args.numel)))


if __name__ == "__main__":
    main()
