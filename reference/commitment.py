"""The pseudo-gradient commitment: the exact packet this node fed the all-reduce, as a blob.

A node's round commitment is its own pseudo-gradient ``base - local`` in the round's wire format
(int8 codes + fp32 block scales for int8; the fp32 or bf16 values otherwise), produced by the
codec's fused subtract-and-quantize kernel and averaged by
:func:`trainer.network.allreduce.average`. So uploading it costs what one all-reduce packet costs
(about 1 byte per parameter in int8), not 4 bytes per parameter, and the audit can replay the
round's weighted average and outer step bit for bit from the members' commitments
(:func:`reference.mean.simulate_average` accepts the packets;
:func:`reference.outer.outer_step`).

Blob layout (safetensors, protocol.blobs): ``payload`` (int8 / fp32 / bf16, 1-D), ``scales``
(fp32, int8 only) and ``meta`` (int64 ``[format number, numel, block size]``). Its id, the
canonical tensor hash, is what the attestation commits to.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from protocol.blobs import encode_blob
from protocol.errors import EncodingError
from protocol.hashing import hash_state_dict
from reference.codec import Packet, WireFormat, decode


def tensors_of(packet: Packet) -> dict[str, Tensor]:
    out = {
        "payload": packet.payload.detach().cpu(),
        "meta": torch.tensor([int(packet.fmt), packet.numel, packet.block_size], dtype=torch.int64),
    }
    if packet.scales is not None:
        out["scales"] = packet.scales.detach().cpu()
    return out


def packet_of(tensors: dict[str, Tensor]) -> Packet:
    """The packet a commitment blob holds; EncodingError if the layout is wrong."""
    meta = tensors.get("meta")
    if meta is None or meta.dtype != torch.int64 or tuple(meta.shape) != (3,):
        raise EncodingError("commitment blob: `meta` must be int64 [format, numel, block size]")
    fmt_no, numel, block = (int(v) for v in meta.tolist())
    try:
        fmt = WireFormat.parse(fmt_no)
        return Packet(fmt, (numel,), tensors["payload"], tensors.get("scales"), block)
    except KeyError:
        raise EncodingError("commitment blob: `payload` is missing") from None
    except Exception as exc:  # ConfigError / TrainerError from the codec's own checks
        raise EncodingError(f"commitment blob: {exc}") from exc


def is_commitment(tensors: dict[str, Tensor]) -> bool:
    return set(tensors) in ({"payload", "meta"}, {"payload", "meta", "scales"})


def blob(packet: Packet) -> bytes:
    return encode_blob(tensors_of(packet))


def commitment_hash(packet: Packet) -> bytes:
    return bytes(hash_state_dict(tensors_of(packet)))


def decoded(tensors: dict[str, Tensor]) -> Tensor:
    """The flat fp32 pseudo-gradient a commitment encodes (what the other nodes decoded)."""
    return decode(packet_of(tensors))


FLAT = "pseudo_gradient"
"""The one tensor name of a decoded commitment (a flat fp32 vector, FlatLayout order)."""


def as_flat(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A commitment blob's tensors decoded to ``{FLAT: fp32 vector}``; any other blob (named
    fp32 tensors, the format before commitments) is returned as it is."""
    if is_commitment(dict(tensors)):
        return {FLAT: decoded(dict(tensors))}
    return dict(tensors)


def named(tensors: Mapping[str, Tensor], shapes: Mapping[str, torch.Size]) -> dict[str, Tensor]:
    """Per-parameter views of a decoded commitment, by the model's parameter shapes."""
    if set(tensors) != {FLAT}:
        return dict(tensors)
    from reference.outer import FlatLayout

    return FlatLayout(shapes).unflatten(tensors[FLAT])
