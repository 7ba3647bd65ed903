"""The pure-torch codec: the reference every other backend must match bit for bit.

All functions take flat, contiguous fp32 tensors. `local=None` means "encode `base` itself"
(no subtraction). Used on CPU when the native kernels cannot be built and by the tests.
"""

from __future__ import annotations

import torch

from protocol.errors import TrainerError
from reference.codec.formats import TINY_AMAX, num_blocks
from reference.settings import WireFormat


def nonfinite_error(what: str) -> TrainerError:
    return TrainerError(
        f"{what} contains NaN or Inf values, so it cannot be encoded for the all-reduce; "
        "the inner steps diverged: lower the inner learning rate or restart from the last "
        "checkpoint"
    )


def encode(
    base: torch.Tensor, local: torch.Tensor | None, fmt: WireFormat, block_size: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return (payload, scales) of `base - local` (or of `base` when `local` is None)."""
    d = base - local if local is not None else base.clone()
    if fmt is WireFormat.FP32:
        if not bool(torch.isfinite(d).all()):
            raise nonfinite_error("the pseudo-gradient")
        return d, None
    if fmt is WireFormat.BF16:
        if not bool(torch.isfinite(d).all()):
            raise nonfinite_error("the pseudo-gradient")
        return d.to(torch.bfloat16), None
    n = d.numel()
    blocks = num_blocks(n, block_size)
    padded = torch.zeros(blocks * block_size, dtype=torch.float32, device=d.device)
    padded[:n] = d
    rows = padded.view(blocks, block_size)
    amax = rows.abs().amax(dim=1)
    if not bool(torch.isfinite(amax).all()):
        raise nonfinite_error("the pseudo-gradient")
    tiny = amax < TINY_AMAX
    zero = torch.zeros_like(amax)
    c127 = torch.full_like(amax, 127.0)
    # tensor / tensor is one correctly rounded division; `127.0 / t` would be t.reciprocal() * 127
    inv = torch.where(tiny, zero, c127 / torch.where(tiny, torch.ones_like(amax), amax))
    scales = torch.where(tiny, zero, amax / c127)
    q = torch.round(rows * inv[:, None]).to(torch.int8)
    return q.view(-1), scales


def decode(
    payload: torch.Tensor,
    scales: torch.Tensor | None,
    fmt: WireFormat,
    numel: int,
    block_size: int,
) -> torch.Tensor:
    """Return the flat fp32 values of an encoded payload."""
    if fmt is WireFormat.FP32:
        return payload[:numel].clone()
    if fmt is WireFormat.BF16:
        return payload[:numel].to(torch.float32)
    assert scales is not None
    rows = payload.view(-1, block_size).to(torch.float32) * scales[:, None]
    return rows.view(-1)[:numel].contiguous()


def decode_add_(
    acc: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor | None,
    fmt: WireFormat,
    block_size: int,
) -> None:
    """`acc += decode(payload)` in fp32 (one rounding per add, no FMA)."""
    acc.add_(decode(payload, scales, fmt, acc.numel(), block_size))
