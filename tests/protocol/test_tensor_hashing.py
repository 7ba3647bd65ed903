"""Canonical state-dict hash: the documented byte stream, determinism, sensitivity, no copies."""

from __future__ import annotations

import struct

import pytest
import torch
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import EncodingError
from protocol.hashing import MAGIC, hash_state_dict, tensor_bytes


def sample() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {
        "layer.weight": torch.randn(8, 16, generator=g),
        "layer.bias": torch.randn(16, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(12, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 4),
    }


def spec_hash(sd: dict[str, torch.Tensor]) -> bytes:
    """An independent, copying implementation of the documented format."""
    h = blake3(MAGIC + struct.pack("<Q", len(sd)))
    for name in sorted(sd):
        t = sd[name].contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        dtype = str(t.dtype).split(".")[1].encode()
        h.update(struct.pack("<I", len(name.encode())) + name.encode())
        h.update(struct.pack("<I", len(dtype)) + dtype)
        h.update(struct.pack("<I", t.dim()) + b"".join(struct.pack("<Q", d) for d in t.shape))
        h.update(struct.pack("<Q", len(data)) + data)
    return h.digest()


def test_matches_the_documented_byte_stream() -> None:
    sd = sample()
    assert hash_state_dict(sd) == spec_hash(sd)
    assert len(hash_state_dict(sd)) == 32


def test_pinned_value_for_a_fixed_state_dict() -> None:
    # Any change to the format changes this value: bump MAGIC and docs/protocol.md with it.
    sd = {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.ones(2, dtype=torch.bfloat16),
    }
    assert hash_state_dict(sd).hex() == spec_hash(sd).hex()
    assert hash_state_dict(sd).hex() == PINNED


PINNED = "f16097e6570b285860fe2c3c2539a715253e1ebfdfd3b046615161d1a8ea173f"


def test_same_weights_same_hash_regardless_of_order_layout_or_copy() -> None:
    sd = sample()
    reordered = dict(reversed(list(sd.items())))
    assert hash_state_dict(reordered) == hash_state_dict(sd)
    clones = {k: v.clone() for k, v in sd.items()}
    assert hash_state_dict(clones) == hash_state_dict(sd)
    transposed = sd["layer.weight"].t().contiguous().t()  # same values, column-major storage
    assert not transposed.is_contiguous()
    assert hash_state_dict(sd | {"layer.weight": transposed}) == hash_state_dict(sd)
    assert hash_state_dict(
        sd | {"layer.weight": sd["layer.weight"].requires_grad_()}
    ) == hash_state_dict(sd)


def test_any_single_element_change_changes_the_hash() -> None:
    sd = sample()
    base = hash_state_dict(sd)
    seen = {base}
    for index in range(sd["layer.weight"].numel()):
        changed = sd["layer.weight"].clone()
        changed.view(-1)[index] = torch.nextafter(changed.view(-1)[index], torch.tensor(1e9))
        seen.add(hash_state_dict(sd | {"layer.weight": changed}))
    assert len(seen) == sd["layer.weight"].numel() + 1
    flipped = sd["layer.bias"].clone()
    flipped.view(torch.int16)[0] ^= 1
    assert hash_state_dict(sd | {"layer.bias": flipped}) != base
    assert hash_state_dict(sd | {"mask": torch.tensor([True, True, True])}) != base


def test_name_dtype_and_shape_are_part_of_the_hash() -> None:
    w = torch.arange(12, dtype=torch.int32)
    base = hash_state_dict({"w": w})
    assert hash_state_dict({"v": w}) != base
    assert hash_state_dict({"w": w.view(3, 4)}) != base
    assert hash_state_dict({"w": w.view(torch.float32)}) != base  # same bytes, other dtype
    assert hash_state_dict({"w": w, "x": torch.empty(0)}) != base
    # moving bytes between the name and the data cannot collide (length prefixes)
    assert hash_state_dict({"ab": torch.tensor([1], dtype=torch.uint8)}) != hash_state_dict(
        {"a": torch.tensor([98, 1], dtype=torch.uint8)}
    )


def test_contiguous_cpu_tensors_are_not_copied() -> None:
    t = torch.randn(1000)
    view = tensor_bytes("t", t)
    import numpy as np

    assert np.shares_memory(np.asarray(view), t.numpy())


def test_refuses_what_has_no_canonical_bytes() -> None:
    with pytest.raises(EncodingError, match="only dense tensors"):
        hash_state_dict({"s": torch.eye(3).to_sparse()})
    with pytest.raises(EncodingError, match=r"x: expected a torch\.Tensor"):
        hash_state_dict({"x": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(EncodingError, match="names must be str"):
        hash_state_dict({1: torch.zeros(1)})  # type: ignore[dict-item]
    with pytest.raises(EncodingError, match="expected a mapping"):
        hash_state_dict([torch.zeros(1)])  # type: ignore[arg-type]


def test_views_into_larger_storage_hash_only_their_own_bytes() -> None:
    big = torch.arange(100, dtype=torch.float32)
    window = big[10:20]
    assert window.is_contiguous() and window.storage_offset() == 10
    assert hash_state_dict({"w": window}) == hash_state_dict({"w": window.clone()})
    rows = torch.arange(30, dtype=torch.int16).reshape(6, 5)[2:4]
    assert hash_state_dict({"r": rows}) == hash_state_dict({"r": rows.clone()})


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 5), max_size=3),
    seed=st.integers(0, 2**16),
    transpose=st.booleans(),
)
def test_random_tensors_follow_the_spec(
    dtype: torch.dtype, shape: list[int], seed: int, transpose: bool
) -> None:
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(tuple(shape), generator=g, dtype=torch.float64) * 50).to(dtype)
    if transpose and t.dim() >= 2:
        t = t.transpose(0, 1)
    sd = {"t": t, "u": torch.ones(2, dtype=dtype)}
    assert hash_state_dict(sd) == spec_hash(sd)
