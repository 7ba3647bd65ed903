"""bench.sparse_bits: the diagnostic top-k wire's sizes are exact (today's shape is the codec's
own byte count; enumerative and Rice-coded positions are counted bit for bit), its 2-bit values
are the codec's to the bit, its 1-bit values are the sign times the mean kept magnitude, what it
does not send is carried, and ``fit_k`` keeps the largest k that meets a bytes target."""

from __future__ import annotations

import math

import pytest
import torch

from bench.sparse_bits import TopkCodec, TopkSpec, fit_k, ratio_vs_sync, rice_bits
from protocol.errors import ConfigError
from reference.codec.sparse import SPARSE_SPEC, compress, decode_sparse, sparse_wire_bytes

NUMEL = 119_424  # the tiny model's parameters (bench.diloco)


def test_todays_shape_is_the_codecs_bytes_and_its_2_bit_values_the_codecs_bits() -> None:
    spec = TopkSpec(chunk=256, k=16, value_bits=2, coding="fixed", scale_bits=32)
    assert spec.packet_bytes(NUMEL) == sparse_wire_bytes(NUMEL, SPARSE_SPEC) == 11_208
    torch.manual_seed(0)
    update, residual = torch.randn(1000), torch.randn(1000)
    ours, ours_left = TopkCodec(spec).compress(update, residual, None, 0.95)
    theirs, theirs_left = compress(update, residual, SPARSE_SPEC, 0.95)
    assert torch.equal(ours.values, decode_sparse(theirs))
    assert torch.equal(ours_left, theirs_left)
    assert ours.nbytes == theirs.nbytes


def test_enumerative_and_rice_positions_are_counted_bit_for_bit() -> None:
    spec = TopkSpec(chunk=256, k=16, coding="enum")
    assert spec.index_bits() == math.ceil(math.log2(math.comb(256, 16))) == 84
    # 3 chunks (600 values, the last padded): (84 + 16 * 2 + 32) bits a chunk, rounded up once
    assert spec.packet_bytes(600) == math.ceil(3 * (84 + 32 + 32) / 8)
    # rice, r = floor(log2(8 / 2)) = 2: gaps 1 and 4 -> (0+1+2) + (1+1+2) bits; gaps 0, 0 -> 6
    offsets = torch.tensor([[1, 6], [0, 1]])
    assert TopkSpec(chunk=8, k=2, coding="rice").rice_r == 2
    assert rice_bits(offsets, 2) == 3 + 4 + 3 + 3
    with pytest.raises(ConfigError, match="no fixed size"):
        TopkSpec(coding="rice").index_bits()


@pytest.mark.parametrize("scale_bits", [32, 16])
def test_one_bit_values_are_the_sign_times_the_mean_kept_magnitude(scale_bits: int) -> None:
    spec = TopkSpec(chunk=8, k=3, value_bits=1, coding="rice", scale_bits=scale_bits)
    x = torch.tensor([0.1, -3.0, 0.2, 1.0, -0.3, 2.01, 0.0, 0.05,
                      5.0, -1.0, 3.0, 0.01, 0.02, 0.03, 0.04, 0.06])  # fmt: skip
    packet, left = TopkCodec(spec).compress(x, None, None, 0.95)
    s0 = torch.tensor([3.0, 1.0, 2.01]).mean()  # chunk 0 keeps -3, 1, 2.01
    s0 = s0.to(torch.bfloat16).float() if scale_bits == 16 else s0
    assert (s0 == 2.0) == (scale_bits == 16)  # bf16 rounds the scale before it is used
    want = torch.zeros(16)
    want[[1, 3, 5]] = torch.tensor([-1.0, 1.0, 1.0]) * s0
    want[[8, 9, 10]] = torch.tensor([3.0, -3.0, 3.0])  # chunk 1 keeps 5, -1, 3: mean 3
    torch.testing.assert_close(packet.values, want, rtol=1e-6, atol=0.0)
    assert torch.equal(left, x - packet.values)  # the rest is carried to the next round
    # rice at r = floor(log2(8 / 3)) = 1: gaps (1, 1, 1) and (0, 0, 0), 2 bits each; then
    # 3 sign bits and one scale a chunk
    assert packet.nbytes == math.ceil((12 + 2 * (3 + scale_bits)) / 8)


def test_fit_keeps_the_largest_k_that_meets_the_ratio_and_refuses_an_impossible_one() -> None:
    base = TopkSpec(chunk=1024, value_bits=1, coding="enum", scale_bits=16)
    fit = fit_k(base, NUMEL, inner_steps=25, workers=4, ratio=1000)
    assert ratio_vs_sync(fit, NUMEL, 25, 4) >= 1000
    assert ratio_vs_sync(TopkSpec(1024, fit.k + 1, 1, "enum", 16), NUMEL, 25, 4) < 1000
    assert fit_k(base, NUMEL, inner_steps=50, workers=4, ratio=1000).k > 2 * fit.k
    with pytest.raises(ConfigError, match="no k of"):
        fit_k(base, NUMEL, inner_steps=1, workers=4, ratio=1000)
    with pytest.raises(ConfigError, match="exact size"):
        fit_k(TopkSpec(coding="rice"), NUMEL, 25, 4, 1000)
    with pytest.raises(ConfigError, match="value_bits"):
        TopkSpec(value_bits=3)


def test_the_count_mean_divides_each_position_by_its_senders() -> None:
    a = TopkCodec(TopkSpec(chunk=4, k=2, value_bits=1, mean="count"))
    b = TopkCodec(TopkSpec(chunk=4, k=2, value_bits=1))
    packets = [a.compress(torch.tensor(x), None, None, 1.0)[0]
               for x in ([2.0, -2.0, 0.0, 0.0], [4.0, 0.0, 4.0, 0.0])]  # fmt: skip
    assert torch.equal(a.average(packets), torch.tensor([3.0, -2.0, 4.0, 0.0]))
    assert torch.equal(b.average(packets), torch.tensor([3.0, -1.0, 2.0, 0.0]))
    with pytest.raises(ConfigError, match="topk mean"):
        TopkSpec(mean="median")
