"""safetensors blobs: round trip, blob ids, and strict refusal of malformed or oversized data."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
import torch

from protocol.blobs import blob_id, check_blob, decode_blob, encode_blob
from protocol.errors import EncodingError
from protocol.hashing import hash_state_dict

LIMIT = 1 << 20


def sample() -> dict[str, torch.Tensor]:
    w = torch.randn(4, 5)
    return {"w": w, "tied": w, "b": torch.zeros(5, dtype=torch.bfloat16), "n": torch.tensor(3)}


def build(header: dict[str, Any], payload: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


def test_round_trip_keeps_values_and_id() -> None:
    sd = sample()
    blob = encode_blob(sd, metadata={"round": "3"})
    decoded = decode_blob(blob, max_bytes=LIMIT)
    assert sorted(decoded) == sorted(sd)
    for name, tensor in sd.items():
        assert decoded[name].dtype == tensor.dtype
        assert torch.equal(decoded[name], tensor)
    assert blob_id(blob, max_bytes=LIMIT) == hash_state_dict(sd)
    assert check_blob(blob, max_bytes=LIMIT)["__metadata__"] == {"round": "3"}


def test_non_contiguous_input_is_stored_contiguously() -> None:
    t = torch.randn(3, 4).t()
    decoded = decode_blob(encode_blob({"t": t}), max_bytes=LIMIT)
    assert torch.equal(decoded["t"], t)


def good_payload() -> tuple[dict[str, Any], bytes]:
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}  # fmt: skip
    return header, bytes(16)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda h, p: (h, p + b"\x00"), "1 trailing bytes"),
        (lambda h, p: (h, p[:-1]), "bad data_offsets"),
        (lambda h, p: (h | {"a": h["a"] | {"dtype": "F128"}}, p), "unsupported dtype 'F128'"),
        (
            lambda h, p: (h | {"a": h["a"] | {"shape": [3]}}, p),
            "needs 12 bytes, its offsets span 8",
        ),
        (lambda h, p: (h | {"a": h["a"] | {"shape": [-2]}}, p), "malformed shape"),
        (lambda h, p: (h | {"a": h["a"] | {"shape": [True, 2]}}, p), "malformed shape"),
        (
            lambda h, p: (h | {"b": h["b"] | {"data_offsets": [4, 12]}}, p),
            "overlaps or leaves a gap",
        ),
        (lambda h, p: (h | {"a": {"dtype": "F32", "shape": [2]}}, p), "needs exactly dtype, shape"),
        (lambda h, p: (h | {"__metadata__": {"k": 1}}, p), "__metadata__ must map strings"),
    ],
)
def test_malformed_headers_are_refused(mutate: Any, match: str) -> None:
    header, payload = good_payload()
    assert decode_blob(build(header, payload), max_bytes=LIMIT)["b"].dtype == torch.int64
    header, payload = mutate(header, payload)
    with pytest.raises(EncodingError, match=match):
        decode_blob(build(header, payload), max_bytes=LIMIT)


def test_framing_errors_are_refused() -> None:
    blob = encode_blob(sample())
    with pytest.raises(EncodingError, match=r"over the limit of 100 bytes"):
        decode_blob(blob, max_bytes=100)
    with pytest.raises(EncodingError, match="too short"):
        decode_blob(b"\x01\x02", max_bytes=LIMIT)
    with pytest.raises(EncodingError, match=r"header length .* runs past the data"):
        decode_blob(struct.pack("<Q", 10**9) + b"{}", max_bytes=LIMIT)
    with pytest.raises(EncodingError, match="not valid JSON"):
        decode_blob(struct.pack("<Q", 3) + b"{x}", max_bytes=LIMIT)
    with pytest.raises(EncodingError, match="must be a JSON object"):
        decode_blob(struct.pack("<Q", 2) + b"[]", max_bytes=LIMIT)
    entry = b'{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    dup = b'{"a":' + entry + b',"a":' + entry + b"}"
    with pytest.raises(EncodingError, match="'a' appears twice"):
        decode_blob(struct.pack("<Q", len(dup)) + dup + b"\x00", max_bytes=LIMIT)
    with pytest.raises(EncodingError, match="expected bytes"):
        decode_blob("text", max_bytes=LIMIT)  # type: ignore[arg-type]


def test_pickle_is_not_a_blob() -> None:
    import io

    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buffer)
    with pytest.raises(EncodingError):
        decode_blob(buffer.getvalue(), max_bytes=LIMIT)
