"""Tensor blobs on the wire and on disk: safetensors, never pickle, read strictly.

A blob's id is the canonical hash of the tensors it holds
(:func:`protocol.hashing.hash_state_dict`), not of its bytes. :func:`decode_blob` refuses
anything oversized or malformed before safetensors sees it: a header that is not a JSON
object, duplicate names, unknown dtypes, shapes that do not match their byte ranges, gaps,
overlaps or trailing bytes.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any, Final

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from protocol.errors import EncodingError
from protocol.hashing import hash_state_dict
from protocol.types import Bytes32

MAX_HEADER_BYTES: Final = 16 * 1024 * 1024

# safetensors dtype code -> bytes per element
_DTYPE_SIZES: Final[dict[str, int]] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


def encode_blob(sd: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """safetensors bytes of ``sd`` (tensors moved to CPU; tied tensors stored separately)."""
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in sd.items():
        t = _cpu_tensor(name, tensor)
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.numel() and key in seen:
            t = t.clone()
        seen.add(key)
        tensors[name] = t
    try:
        return bytes(_st_save(tensors, metadata=dict(metadata) if metadata else None))
    except Exception as exc:  # safetensors raises its own error types
        raise EncodingError(f"blob: safetensors could not encode the tensors: {exc}") from exc


def _cpu_tensor(name: object, tensor: object) -> torch.Tensor:
    """One entry of a blob's state dict, checked (a str name, a tensor), as a contiguous CPU
    tensor."""
    if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
        raise EncodingError(f"blob: expected str -> torch.Tensor, got {name!r}: {type(tensor)}")
    return tensor.detach().cpu().contiguous()


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise EncodingError(f"blob header: tensor name {key!r} appears twice")
        out[key] = value
    return out


def check_blob(data: bytes | bytearray | memoryview, *, max_bytes: int) -> dict[str, Any]:
    """Validate the safetensors layout of ``data``; return its parsed header."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise EncodingError(f"blob: expected bytes, got {type(data).__name__}")
    size = len(data)
    if size > max_bytes:
        raise EncodingError(f"blob: {size} bytes is over the limit of {max_bytes} bytes")
    if size < 8:
        raise EncodingError(f"blob: {size} bytes is too short for a safetensors header")
    (header_len,) = struct.unpack_from("<Q", data, 0)
    if header_len > min(MAX_HEADER_BYTES, size - 8):
        raise EncodingError(
            f"blob: header length {header_len} runs past the data or the "
            f"{MAX_HEADER_BYTES}-byte header limit; not a safetensors file"
        )
    try:
        header = json.loads(bytes(data[8 : 8 + header_len]), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EncodingError(f"blob: header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise EncodingError("blob: header must be a JSON object of tensor entries")
    payload = size - 8 - header_len
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise EncodingError("blob: __metadata__ must map strings to strings")
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise EncodingError(f"blob: entry {name!r} needs exactly dtype, shape, data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _DTYPE_SIZES:
            raise EncodingError(f"blob: tensor {name!r} has unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise EncodingError(f"blob: tensor {name!r} has a malformed shape {shape!r}")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= payload
        ):
            raise EncodingError(f"blob: tensor {name!r} has bad data_offsets {offsets!r}")
        expected = math.prod(shape) * _DTYPE_SIZES[dtype]
        if offsets[1] - offsets[0] != expected:
            raise EncodingError(
                f"blob: tensor {name!r} of shape {shape} {dtype} needs {expected} bytes, "
                f"its offsets span {offsets[1] - offsets[0]}"
            )
        spans.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise EncodingError(f"blob: tensor {name!r} overlaps or leaves a gap at {position}")
        position = end
    if position != payload:
        raise EncodingError(f"blob: {payload - position} trailing bytes after the last tensor")
    return header


def decode_blob(data: bytes, *, max_bytes: int) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors blob, after :func:`check_blob` accepts it."""
    check_blob(data, max_bytes=max_bytes)
    try:
        return dict(_st_load(bytes(data)))
    except Exception as exc:  # safetensors raises its own error types
        raise EncodingError(f"blob: safetensors refused the data: {exc}") from exc


def blob_id(data: bytes, *, max_bytes: int) -> Bytes32:
    """The id of a blob: the canonical hash of the tensors it holds."""
    return hash_state_dict(decode_blob(data, max_bytes=max_bytes))


_TORCH_DTYPES: Final[dict[str, torch.dtype]] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I16": torch.int16,
    "U16": torch.uint16,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "F32": torch.float32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F64": torch.float64,
}


def tensors_of_buffer(buffer: memoryview, *, max_bytes: int) -> dict[str, torch.Tensor]:
    """Tensors viewing ``buffer`` (e.g. an mmap of a blob file): no copy of the data.

    The layout is checked first (:func:`check_blob`); the tensors are read-only views and
    keep ``buffer`` alive. Same names, dtypes and values as :func:`decode_blob`.
    """
    import warnings

    header = check_blob(buffer, max_bytes=max_bytes)
    (header_len,) = struct.unpack_from("<Q", buffer, 0)
    base = 8 + header_len
    out: dict[str, torch.Tensor] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "buffer is not writable": never written
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype, shape = _TORCH_DTYPES[entry["dtype"]], entry["shape"]
            begin, end = entry["data_offsets"]
            if begin == end:
                out[name] = torch.empty(shape, dtype=dtype)
                continue
            flat = torch.frombuffer(buffer[base + begin : base + end], dtype=torch.uint8)
            out[name] = flat.view(dtype).reshape(shape)
    return out


_DTYPE_CODES: Final[dict[torch.dtype, str]] = {t: code for code, t in _TORCH_DTYPES.items()}


def blob_layout(sd: Mapping[str, torch.Tensor]) -> tuple[bytes, list[tuple[str, torch.Tensor]]]:
    """The safetensors blob of ``sd`` without making it: its first bytes (the 8-byte header
    length and the JSON header, padded with spaces to a multiple of 8) and its tensors in data
    order, whose raw bytes follow one after another. The order and the padding are safetensors'
    own writer's (widest dtype first, then by name), so for a state of fp32 tensors the blob is
    :func:`encode_blob`'s to the byte; with other dtypes mixed in it is a valid blob that
    :func:`decode_blob` reads to the same tensors (a blob's id is its tensors' hash, not its
    bytes). For writers that place the bytes themselves (protocol.files: no copy of the state
    in between)."""
    tensors: list[tuple[str, torch.Tensor]] = []
    for name, tensor in sd.items():
        t = _cpu_tensor(name, tensor)
        if t.dtype not in _DTYPE_CODES:
            raise EncodingError(f"blob: tensor {name!r} has a dtype safetensors lacks: {t.dtype}")
        tensors.append((name, t))
    tensors.sort(key=lambda item: (-item[1].element_size(), item[0]))
    entries: dict[str, dict[str, Any]] = {}
    position = 0
    for name, t in tensors:
        end = position + t.numel() * t.element_size()
        entries[name] = {"dtype": _DTYPE_CODES[t.dtype], "shape": list(t.shape),
                         "data_offsets": [position, end]}  # fmt: skip
        position = end
    header = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header, tensors
