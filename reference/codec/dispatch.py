"""One entry point per codec operation; picks the backend that runs it.

Backends: "triton" (CUDA tensors, when triton imports), "native" (C kernels, CPU), "torch" (the
pure-torch reference; CPU fallback when no C compiler is found). All three are bit-identical.
`COLOCO_CODEC=torch|native|triton` overrides the automatic choice ("triton" on CPU tensors needs
`TRITON_INTERPRET=1`, which is how the tests run the kernels).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from protocol.errors import TrainerError
from reference.codec import native, pure
from reference.codec.backend import resolve_backend
from reference.codec.formats import DEFAULT_BLOCK_SIZE, Packet, check_block_size
from reference.settings import WireFormat


def _flat_fp32(t: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TrainerError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TrainerError(
            f"{what} must be float32 (the pseudo-gradient is computed in fp32), "
            f"got {t.dtype}: convert the weights with .float() first"
        )
    return t.detach().reshape(-1).contiguous()


def encode(
    base: torch.Tensor,
    local: torch.Tensor | None,
    fmt: WireFormat | int | str,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str | None = None,
) -> Packet:
    """Encode the pseudo-gradient `base - local` in `fmt`, subtraction and quantization fused.

    `local=None` encodes `base` itself. Raises TrainerError if the difference holds NaN/Inf.
    """
    fmt = WireFormat.parse(fmt)
    check_block_size(block_size)
    b = _flat_fp32(base, "base")
    loc = None
    if local is not None:
        loc = _flat_fp32(local, "local")
        if local.shape != base.shape or local.device != base.device:
            raise TrainerError(
                f"base {tuple(base.shape)} on {base.device} and local "
                f"{tuple(local.shape)} on {local.device} must have the same shape "
                "and device"
            )
    if fmt is WireFormat.SPARSE:  # stateless here; a node carries its residual (encode_feedback)
        from reference.codec import sparse

        x = b.clone() if loc is None else b - loc
        packed = sparse.encode_sparse(x, sparse.SPARSE_SPEC, backend=backend)
        return sparse.to_packet(packed, tuple(base.shape))
    name = resolve_backend(b.device, backend)
    if name == "native":
        payload, scales = native.encode(b, loc, fmt, block_size)
    elif name == "triton":
        from reference.codec import triton_kernels

        payload, scales = triton_kernels.encode(b, loc, fmt, block_size)
    else:
        payload, scales = pure.encode(b, loc, fmt, block_size)
    return Packet(fmt, tuple(base.shape), payload, scales, block_size)


def quantize(
    x: torch.Tensor,
    fmt: WireFormat | int | str,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str | None = None,
) -> Packet:
    """Encode `x` itself (no subtraction)."""
    return encode(x, None, fmt, block_size=block_size, backend=backend)


def decode_into(
    out: torch.Tensor, packet: Packet, *, accumulate: bool = False, backend: str | None = None
) -> torch.Tensor:
    """Write (or, with `accumulate`, add) the decoded fp32 values into the contiguous `out`."""
    if out.dtype != torch.float32 or not out.is_contiguous() or out.numel() != packet.numel:
        raise TrainerError(
            f"decode target must be a contiguous float32 tensor of "
            f"{packet.numel} values, got {out.dtype} {tuple(out.shape)}"
        )
    flat = out.view(-1)
    if packet.fmt is WireFormat.SPARSE:
        from reference.codec.sparse import decode_sparse

        values = decode_sparse(packet.sparse()).to(flat.device)
        if accumulate:
            flat.add_(values)
        else:
            flat.copy_(values)
        return out
    name = resolve_backend(packet.device, backend)
    if name == "native":
        native.decode_into(
            flat,
            packet.payload,
            packet.scales,
            packet.fmt,
            packet.block_size,
            accumulate=accumulate,
        )
    elif name == "triton":
        from reference.codec import triton_kernels

        triton_kernels.decode_into(
            flat,
            packet.payload,
            packet.scales,
            packet.fmt,
            packet.block_size,
            accumulate=accumulate,
        )
    elif accumulate:
        pure.decode_add_(flat, packet.payload, packet.scales, packet.fmt, packet.block_size)
    else:
        flat.copy_(
            pure.decode(packet.payload, packet.scales, packet.fmt, packet.numel, packet.block_size)
        )
    return out


def decode(packet: Packet, *, backend: str | None = None) -> torch.Tensor:
    """The fp32 values of `packet`, in the shape it was encoded from."""
    out = torch.empty(packet.shape, dtype=torch.float32, device=packet.device)
    return decode_into(out, packet, backend=backend)


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One flat fp32 buffer holding `tensors` in order (no copy for a single contiguous tensor)."""
    if len(tensors) == 0:
        raise TrainerError("cannot flatten an empty list of parameters")
    if len(tensors) == 1:
        return _flat_fp32(tensors[0], "parameter 0")
    return torch.cat([_flat_fp32(t, f"parameter {i}") for i, t in enumerate(tensors)])


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views of `flat` shaped like each tensor in `like` (the inverse of `flatten`)."""
    total = sum(t.numel() for t in like)
    if flat.numel() != total:
        raise TrainerError(
            f"flat buffer has {flat.numel()} values but the parameters need "
            f"{total}: pass the same parameter list that was flattened"
        )
    out, offset = [], 0
    for t in like:
        out.append(flat[offset : offset + t.numel()].view(t.shape))
        offset += t.numel()
    return out


def encode_flat(
    base: Sequence[torch.Tensor],
    local: Sequence[torch.Tensor],
    fmt: WireFormat | int | str,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str | None = None,
) -> Packet:
    """One packet for a whole model: `flatten(base) - flatten(local)`, encoded in `fmt`.

    Blocks run across parameter boundaries, so small tensors cost no padding. For the fastest
    path keep the base weights in one flat buffer and pass `[flat_base]` / `[flat_local]`.
    """
    if len(base) != len(local):
        raise TrainerError(
            f"base has {len(base)} parameters and local {len(local)}: pass the same parameter lists"
        )
    for i, (b, loc) in enumerate(zip(base, local, strict=True)):
        if b.shape != loc.shape:
            raise TrainerError(
                f"parameter {i}: base shape {tuple(b.shape)} != local shape {tuple(loc.shape)}"
            )
    return encode(flatten(base), flatten(local), fmt, block_size=block_size, backend=backend)
