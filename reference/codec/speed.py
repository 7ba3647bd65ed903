"""Codec speed and accuracy measurements shared by `bench.codec` and `bench.diloco`.

`measure_codec_ns_per_param()` is quantize + dequantize time per parameter on ONE CPU thread:
the fused `encode(base, local)` (subtract, block absmax, int8 codes) followed by `decode_into` a
preallocated fp32 buffer, best of several repeats. The error helpers compare the averaged
pseudo-gradient the all-reduce delivers (`reference.mean.simulate_average`,
bit-identical to the distributed result) with the exact fp32 mean.
"""

from __future__ import annotations

import time

import torch

from protocol.errors import ConfigError
from reference.codec.dispatch import decode_into, encode
from reference.codec.formats import DENSE_FORMATS
from reference.settings import WireFormat


def _one_thread_ns(fn: object, numel: int, repeats: int) -> float:
    assert callable(fn)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()  # warm-up: builds/loads kernels, faults pages in
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter_ns()
            fn()
            best = min(best, time.perf_counter_ns() - start)
    finally:
        torch.set_num_threads(threads)
    return best / numel


def measure_codec_ns_per_param(
    numel: int = 1 << 22,
    fmt: WireFormat | int | str = WireFormat.INT8,
    *,
    backend: str | None = None,
    repeats: int = 5,
) -> float:
    """ns per parameter for encode(base, local) + decode on one CPU thread (default backend)."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(numel, generator=gen)
    local = base + 0.01 * torch.randn(numel, generator=gen)
    out = torch.empty(numel)

    def roundtrip() -> None:
        decode_into(out, encode(base, local, fmt, backend=backend), backend=backend)

    return _one_thread_ns(roundtrip, numel, repeats)


def sample_pseudo_gradients(
    kind: str, nodes: int, numel: int, *, seed: int = 0
) -> list[torch.Tensor]:
    """Independent per-node vectors: "gaussian" N(0, 1) or "student_t" (3 degrees of freedom)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(nodes):
        if kind == "gaussian":
            out.append(torch.randn(numel, generator=gen))
        elif kind == "student_t":
            # t = z / sqrt(chi2_3 / 3), chi2_3 = sum of three squared normals
            z = torch.randn(numel, generator=gen)
            chi2 = torch.randn(3, numel, generator=gen).square().sum(dim=0)
            out.append(z / torch.sqrt(chi2 / 3.0))
        else:
            raise ConfigError(f"unknown distribution {kind!r}: use gaussian or student_t")
    return out


def per_tensor_int8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """int8 with ONE absmax scale for the whole tensor (the baseline block scales replace)."""
    amax = x.abs().max()
    if float(amax) == 0.0:
        return torch.zeros_like(x)
    scale = amax / 127.0
    return torch.round(x / scale).clamp(-127, 127) * scale


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx - exact).norm() / exact.norm())


def averaged_errors(kind: str, nodes: int = 8, numel: int = 1 << 20) -> dict[str, float]:
    """Relative error of the averaged pseudo-gradient per wire format, plus per-tensor int8."""
    from reference.mean import simulate_average

    vectors = sample_pseudo_gradients(kind, nodes, numel)
    exact = torch.stack(vectors).mean(dim=0)
    out = {
        fmt.name.lower(): relative_error(simulate_average(vectors, fmt), exact)
        for fmt in DENSE_FORMATS
    }
    # per-tensor baseline, same two-step shape: each node's vector, then the mean, requantized
    summed = torch.zeros(numel)
    for v in vectors:
        summed += per_tensor_int8_roundtrip(v)
    out["int8_per_tensor"] = relative_error(per_tensor_int8_roundtrip(summed / nodes), exact)
    return out
