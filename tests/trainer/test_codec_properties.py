"""Property tests: for any finite fp32 input, native == torch reference, bit for bit, and the
int8 round trip is within half a step of every value."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.codec import WireFormat, decode, encode

finite_f32 = st.floats(
    min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, allow_infinity=False, width=32
)
vectors = arrays(np.float32, st.integers(1, 700), elements=finite_f32)


@settings(max_examples=60, deadline=None)
@given(base=vectors, scale=st.floats(0, 2, width=32), block_size=st.sampled_from([32, 64, 256]))
def test_native_equals_reference_for_any_finite_input(
    base: np.ndarray, scale: float, block_size: int
) -> None:
    b = torch.from_numpy(base.copy())
    local = b * scale  # differences include exact zeros, cancellations and the full range
    for fmt in WireFormat:
        ref = encode(b, local, fmt, block_size=block_size, backend="torch")
        nat = encode(b, local, fmt, block_size=block_size, backend="native")
        assert torch.equal(ref.payload.view(torch.uint8), nat.payload.view(torch.uint8))
        if ref.scales is not None and nat.scales is not None:
            assert torch.equal(ref.scales, nat.scales)
        assert torch.equal(decode(ref, backend="torch"), decode(nat, backend="native"))


@settings(max_examples=60, deadline=None)
@given(x=vectors)
def test_int8_round_trip_is_within_half_a_step(x: np.ndarray) -> None:
    t = torch.from_numpy(x.copy())
    packet = encode(t, None, "int8", block_size=32)
    assert packet.scales is not None
    step = packet.scales.repeat_interleave(32)[: t.numel()].double()
    err = (decode(packet).double() - t.double()).abs()
    tiny = t.abs().double().view(-1) < 2.0**-100  # tiny blocks encode as zero
    assert bool((err <= step * 0.5 * (1 + 1e-6) + tiny.double() * 2.0**-100).all())
