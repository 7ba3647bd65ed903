# ruff: noqa: N803, PLR0917  (Triton convention: constexpr meta-parameters are UPPER_CASE)
# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""Triton codec kernels (GPU; on CPU only under `TRITON_INTERPRET=1`, as the tests run them).

Same arithmetic as the torch reference and the native C kernels, bit for bit: absmax as an
integer max over |d|'s bit patterns, IEEE round-to-nearest divisions (`div_rn`), round half to
even by adding and subtracting 1.5 * 2**23, and FMA contraction disabled at launch so the product
`d * inv` is rounded before the add. Each program handles `ROWS` blocks of `BS` values (int8) or
`BLOCK` values (fp32/bf16).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference.codec.formats import PAYLOAD_DTYPE, TINY_AMAX, num_blocks
from reference.codec.pure import nonfinite_error
from reference.settings import WireFormat

ROWS = 16
DENSE_BLOCK = 4096
_LAUNCH = {"enable_fp_fusion": False}


@triton.jit
def _enc_i8_kernel(
    base_ptr, local_ptr, q_ptr, s_ptr, n, n_blocks,
    TINY: tl.constexpr, HAS_LOCAL: tl.constexpr, BS: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = rows[:, None].to(tl.int64) * BS + tl.arange(0, BS)[None, :]
    inside = offs < n
    d = tl.load(base_ptr + offs, mask=inside, other=0.0)
    if HAS_LOCAL:
        d = d - tl.load(local_ptr + offs, mask=inside, other=0.0)
    mbits = tl.max(d.to(tl.uint32, bitcast=True) & 0x7FFFFFFF, axis=1)
    amax = mbits.to(tl.float32, bitcast=True)
    finite = mbits < 0x7F800000
    ok = (amax >= TINY) & finite
    safe = tl.where(ok, amax, 1.0)
    c127 = tl.full([ROWS], 127.0, tl.float32)
    inv = tl.where(ok, tl.math.div_rn(c127, safe), 0.0)
    scale = tl.where(ok, tl.math.div_rn(safe, c127), 0.0)
    scale = tl.where(finite, scale, -1.0)  # a negative scale flags NaN/Inf; the launcher raises
    y = d * inv[:, None]
    y = (y + 12582912.0) - 12582912.0
    row_ok = rows < n_blocks
    tl.store(q_ptr + offs, y.to(tl.int8), mask=row_ok[:, None])
    tl.store(s_ptr + rows, scale, mask=row_ok)


@triton.jit
def _dec_i8_kernel(
    q_ptr, s_ptr, out_ptr, n, BS: tl.constexpr, ROWS: tl.constexpr, ACCUMULATE: tl.constexpr
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = rows[:, None].to(tl.int64) * BS + tl.arange(0, BS)[None, :]
    inside = offs < n
    scale = tl.load(s_ptr + rows, mask=rows.to(tl.int64) * BS < n, other=0.0)
    v = tl.load(q_ptr + offs, mask=inside, other=0).to(tl.float32) * scale[:, None]
    if ACCUMULATE:
        v = tl.load(out_ptr + offs, mask=inside, other=0.0) + v
    tl.store(out_ptr + offs, v, mask=inside)


@triton.jit
def _enc_dense_kernel(
    base_ptr, local_ptr, out_ptr, flag_ptr, n,
    HAS_LOCAL: tl.constexpr, TO_BF16: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    d = tl.load(base_ptr + offs, mask=inside, other=0.0)
    if HAS_LOCAL:
        d = d - tl.load(local_ptr + offs, mask=inside, other=0.0)
    bits = d.to(tl.uint32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    tl.store(flag_ptr + pid, tl.max((mag >= 0x7F800000).to(tl.int32), axis=0))
    if TO_BF16:
        r = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        r = tl.where(mag > 0x7F800000, 0x7FC0, r)
        tl.store(out_ptr + offs, r.to(tl.int32).to(tl.int16), mask=inside)
    else:
        tl.store(out_ptr + offs, d, mask=inside)


@triton.jit
def _dec_bf16_kernel(in_ptr, out_ptr, n, BLOCK: tl.constexpr, ACCUMULATE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    h = tl.load(in_ptr + offs, mask=inside, other=0).to(tl.int32) & 0xFFFF
    v = (h << 16).to(tl.float32, bitcast=True)
    if ACCUMULATE:
        v = tl.load(out_ptr + offs, mask=inside, other=0.0) + v
    tl.store(out_ptr + offs, v, mask=inside)


def encode(
    base: torch.Tensor, local: torch.Tensor | None, fmt: WireFormat, block_size: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    n = base.numel()
    has_local = local is not None
    other = local if local is not None else base
    if fmt is WireFormat.INT8:
        blocks = num_blocks(n, block_size)
        q = torch.empty(blocks * block_size, dtype=torch.int8, device=base.device)
        scales = torch.empty(blocks, dtype=torch.float32, device=base.device)
        grid = (triton.cdiv(blocks, ROWS),)
        _enc_i8_kernel[grid](
            base, other, q, scales, n, blocks,
            TINY=TINY_AMAX, HAS_LOCAL=has_local, BS=block_size, ROWS=ROWS, **_LAUNCH,
        )  # fmt: skip
        if bool((scales < 0).any()):
            raise nonfinite_error("the pseudo-gradient")
        return q, scales
    out = torch.empty(n, dtype=PAYLOAD_DTYPE[fmt], device=base.device)
    programs = triton.cdiv(n, DENSE_BLOCK)
    flags = torch.empty(max(programs, 1), dtype=torch.int32, device=base.device)
    if n:
        target = out.view(torch.int16) if fmt is WireFormat.BF16 else out
        _enc_dense_kernel[(programs,)](
            base, other, target, flags, n,
            HAS_LOCAL=has_local, TO_BF16=fmt is WireFormat.BF16, BLOCK=DENSE_BLOCK, **_LAUNCH,
        )  # fmt: skip
        if bool(flags.any()):
            raise nonfinite_error("the pseudo-gradient")
    return out, None


def decode_into(
    out: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor | None,
    fmt: WireFormat,
    block_size: int,
    *,
    accumulate: bool,
) -> None:
    n = out.numel()
    if n == 0:
        return
    if fmt is WireFormat.INT8:
        assert scales is not None
        grid = (triton.cdiv(num_blocks(n, block_size), ROWS),)
        _dec_i8_kernel[grid](
            payload, scales, out, n,
            BS=block_size, ROWS=ROWS, ACCUMULATE=accumulate, **_LAUNCH,
        )  # fmt: skip
    elif fmt is WireFormat.BF16:
        _dec_bf16_kernel[(triton.cdiv(n, DENSE_BLOCK),)](
            payload.view(torch.int16), out, n,
            BLOCK=DENSE_BLOCK, ACCUMULATE=accumulate, **_LAUNCH,
        )  # fmt: skip
    elif accumulate:
        out.add_(payload[:n])
    else:
        out.copy_(payload[:n])
