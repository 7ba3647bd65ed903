# ruff: noqa: N803, PLR0917  (Triton convention: constexpr meta-parameters are UPPER_CASE)
# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""The sparse format's selection and quantization as one Triton kernel (a program per chunk).

Bit for bit the rule of :mod:`reference.codec.sparse`: the same unique int64 keys
(``bits(|x|) * 2**16 + (2**16 - 1 - offset)``, padding far below), sorted in the program; the
k-th largest key is the threshold, so the kept set is exactly the reference's; offsets and codes
are written in ascending offset order through a running count of the kept mask; ``step =
amax / (L - 0.5)`` and ``x / step`` are IEEE divisions (``div_rn``). Returns the unpacked
(chunks, k) offsets and codes and the steps; the caller packs them into the wire bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference.codec.formats import TINY_AMAX

_LAUNCH = {"enable_fp_fusion": False}


@triton.jit
def _sparse_select_kernel(
    x_ptr, off_ptr, code_ptr, step_ptr, n,
    TINY: tl.constexpr, CHUNK: tl.constexpr, K: tl.constexpr, L: tl.constexpr,
):  # fmt: skip
    c = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    pos = c * CHUNK + offs
    inside = pos < n
    x = tl.load(x_ptr + pos, mask=inside, other=0.0)
    mag = (x.to(tl.int32, bitcast=True) & 0x7FFFFFFF).to(tl.int64)
    key = mag * 65536 + (65535 - offs).to(tl.int64)
    key = tl.where(inside, key, key - 281474976710656)  # padding: below every real value (2**48)
    ordered = tl.sort(key, descending=True)
    kth = tl.sum(tl.where(offs == K - 1, ordered, 0))
    keep = key >= kth
    slot = tl.cumsum(keep.to(tl.int32), 0) - 1
    amax = tl.max(tl.where(keep, mag, 0)).to(tl.int32).to(tl.float32, bitcast=True)
    ok = amax >= TINY
    step = tl.where(ok, tl.math.div_rn(amax, tl.full([], L - 0.5, tl.float32)), 0.0)
    div = tl.where(ok, step, 1.0)
    q = tl.floor(tl.math.div_rn(x, tl.zeros_like(x) + div)).to(tl.int32) + L
    q = tl.minimum(tl.maximum(q, 0), 2 * L - 1)
    q = tl.where(ok, q, L)
    out = c * K + slot
    tl.store(off_ptr + out, offs, mask=keep)
    tl.store(code_ptr + out, q, mask=keep)
    tl.store(step_ptr + c, step)


def select(
    x: torch.Tensor, chunk: int, k: int, levels: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(offsets (chunks, k) int64, codes (chunks, k) int64, steps (chunks,) fp32) of the flat,
    finite fp32 vector ``x`` (on the GPU, or on the CPU under ``TRITON_INTERPRET=1``)."""
    n = x.numel()
    chunks = triton.cdiv(n, chunk)
    offsets = torch.empty(chunks * k, dtype=torch.int32, device=x.device)
    codes = torch.empty(chunks * k, dtype=torch.int32, device=x.device)
    steps = torch.empty(chunks, dtype=torch.float32, device=x.device)
    _sparse_select_kernel[(chunks,)](
        x, offsets, codes, steps, n, TINY=TINY_AMAX, CHUNK=chunk, K=k, L=levels, **_LAUNCH
    )
    return offsets.view(chunks, k).long(), codes.view(chunks, k).long(), steps
