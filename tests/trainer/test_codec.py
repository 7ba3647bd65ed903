"""Wire codec on CPU: native C kernels against the torch reference, bit for bit; error bounds."""

from __future__ import annotations

import pytest
import torch

from protocol.errors import ConfigError, TrainerError
from reference.codec import (
    Packet,
    WireFormat,
    decode,
    decode_into,
    encode,
    encode_flat,
    native,
    quantize,
    resolve_backend,
    unflatten,
    wire_bytes,
)

CPU_BACKENDS = ["torch", "native"]
FORMATS = list(WireFormat)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def _cases() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    ties = torch.tensor([127.0, 63.5, -47.5, 0.5, -0.5, 1.5, 2.5])  # exact .5 after scaling
    tiny_block = torch.full((256,), 1e-38)  # absmax below 2**-100: encodes as zeros
    mixed = torch.cat([tiny_block, torch.randn(300, generator=gen) * 1e30])
    heavy = torch.distributions.StudentT(3.0).sample((5000,))
    return [
        torch.randn(1, generator=gen),
        torch.randn(255, generator=gen),
        torch.randn(256, generator=gen),
        torch.randn(70_001, generator=gen),
        torch.zeros(513),
        ties,
        mixed,
        heavy,
    ]


def test_native_kernels_build_here() -> None:
    assert native.load() is not None, "gcc is on these machines; the native codec must build"
    assert resolve_backend(torch.device("cpu")) == "native"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("block_size", [32, 256, 4096])
def test_native_matches_torch_reference_bit_for_bit(fmt: WireFormat, block_size: int) -> None:
    for x in _cases():
        local = x * 0.5 + 0.25
        ref = encode(x, local, fmt, block_size=block_size, backend="torch")
        nat = encode(x, local, fmt, block_size=block_size, backend="native")
        assert torch.equal(_bits(ref.payload), _bits(nat.payload)), (fmt, x.numel())
        if fmt is WireFormat.INT8:
            assert ref.scales is not None and nat.scales is not None
            assert torch.equal(ref.scales, nat.scales)
        assert torch.equal(decode(ref, backend="torch"), decode(nat, backend="native"))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_encode_is_quantize_of_the_difference(backend: str) -> None:
    base, local = torch.randn(3000), torch.randn(3000)
    fused = encode(base, local, "int8", backend=backend)
    plain = quantize(base - local, "int8", backend=backend)
    assert torch.equal(fused.payload, plain.payload)
    assert fused.scales is not None and plain.scales is not None
    assert torch.equal(fused.scales, plain.scales)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_int8_error_is_at_most_half_a_step_per_block(backend: str) -> None:
    x = torch.distributions.StudentT(3.0).sample((10_000,))
    packet = quantize(x, "int8", backend=backend)
    assert packet.scales is not None
    back = decode(packet, backend=backend)
    step = packet.scales.repeat_interleave(256)[: x.numel()]
    assert bool(((back - x).abs() <= step * 0.5 * (1 + 1e-5)).all())
    codes = packet.payload.to(torch.int32)
    assert int(codes.abs().max()) == 127  # the block absmax maps to full scale


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bf16_rounds_to_nearest_even_and_fp32_is_exact(backend: str) -> None:
    x = torch.randn(4099)
    assert torch.equal(decode(quantize(x, "fp32", backend=backend)), x)
    bf = decode(quantize(x, "bf16", backend=backend), backend=backend)
    assert torch.equal(bf, x.to(torch.bfloat16).float())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_decode_into_accumulates_in_place(backend: str) -> None:
    x = torch.randn(1000)
    packet = quantize(x, "int8", backend=backend)
    out = torch.ones(1000)
    decode_into(out, packet, accumulate=True, backend=backend)
    assert torch.equal(out, 1.0 + decode(packet, backend="torch"))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_pseudo_gradients_are_refused(backend: str, fmt: WireFormat, bad: float) -> None:
    x = torch.randn(1000)
    x[777] = bad
    with pytest.raises(TrainerError, match="NaN or Inf"):
        encode(x, torch.zeros(1000), fmt, backend=backend)


def test_packet_bytes_and_int8_ratio() -> None:
    n = 1_000_000
    packets = {fmt: quantize(torch.randn(n), fmt) for fmt in FORMATS}
    for fmt, p in packets.items():
        assert p.nbytes == wire_bytes(n, fmt)
    assert packets[WireFormat.FP32].nbytes == 4 * n
    assert packets[WireFormat.BF16].nbytes == 2 * n
    ratio = packets[WireFormat.FP32].nbytes / packets[WireFormat.INT8].nbytes
    assert 3.9 <= ratio < 4.0


def test_encode_flat_spans_parameters_and_unflatten_restores_shapes() -> None:
    shapes = [(3, 5), (7,), (2, 2, 2), (1,)]
    base = [torch.randn(s) for s in shapes]
    local = [torch.randn(s) for s in shapes]
    packet = encode_flat(base, local, "bf16")
    assert packet.shape == (sum(torch.Size(s).numel() for s in shapes),)
    views = unflatten(decode(packet), base)
    for view, b, loc in zip(views, base, local, strict=True):
        assert view.shape == b.shape
        assert torch.equal(view, (b - loc).to(torch.bfloat16).float())


def test_wire_format_parses_chain_numbers_and_names() -> None:
    assert WireFormat.parse(2) is WireFormat.INT8
    assert WireFormat.parse("bf16") is WireFormat.BF16
    assert WireFormat.parse(WireFormat.FP32) is WireFormat.FP32
    assert WireFormat.parse(3) is WireFormat.parse("sparse") is WireFormat.SPARSE
    with pytest.raises(ConfigError, match="2 \\(int8\\) or 3 \\(sparse\\)"):
        WireFormat.parse(4)
    with pytest.raises(ConfigError, match="fp32, bf16, int8, sparse"):
        WireFormat.parse("fp8")


def test_bad_inputs_name_what_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        quantize(torch.randn(10), "int8", block_size=100)
    with pytest.raises(TrainerError, match="float32"):
        quantize(torch.randn(10, dtype=torch.float64), "int8")
    with pytest.raises(TrainerError, match="same shape"):
        encode(torch.randn(10), torch.randn(11), "int8")
    with pytest.raises(TrainerError, match="same parameter lists"):
        encode_flat([torch.randn(2)], [], "int8")
    with pytest.raises(TrainerError, match="contiguous float32 tensor of 10"):
        decode_into(torch.empty(9), quantize(torch.randn(10), "fp32"))
    monkeypatch.setenv("COLOCO_CODEC", "cuda-magic")
    with pytest.raises(ConfigError, match="not a codec backend"):
        quantize(torch.randn(10), "int8")
    monkeypatch.setenv("COLOCO_CODEC", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
        quantize(torch.randn(10), "int8")


def test_env_override_selects_the_torch_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLOCO_CODEC", "torch")
    assert resolve_backend(torch.device("cpu")) == "torch"
    packet = quantize(torch.randn(10), "int8")
    assert isinstance(packet, Packet)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_exact_halves_round_to_even(backend: str) -> None:
    x = torch.tensor([127.0, 63.5, -47.5, 0.5, -0.5, 1.5, 2.5, -2.5])  # absmax 127: scale 1
    packet = quantize(x, "int8", backend=backend)
    assert packet.payload[:8].tolist() == [127, 64, -48, 0, 0, 2, 2, -2]


def test_a_packet_checks_its_own_parts() -> None:
    with pytest.raises(TrainerError, match="per-block scales"):
        Packet(WireFormat.INT8, (256,), torch.zeros(256, dtype=torch.int8), None)
    with pytest.raises(TrainerError, match="needs 2 scales and 512 codes"):
        Packet(WireFormat.INT8, (300,), torch.zeros(256, dtype=torch.int8), torch.zeros(1))
    with pytest.raises(TrainerError, match=r"1-D torch\.bfloat16 payload"):
        Packet(WireFormat.BF16, (4,), torch.zeros(4), None)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_tiny_blocks_are_zero_and_subnormals_round_to_code_zero(backend: str) -> None:
    below = torch.full((32,), 5e-31)  # absmax < 2**-100: the whole block is zero
    above = torch.cat([torch.tensor([1e-30]), torch.full((31,), 1e-40)])  # 1e-40 is subnormal
    packet = quantize(torch.cat([below, above]), "int8", block_size=32, backend=backend)
    assert packet.scales is not None
    assert packet.scales[0].item() == 0.0 and packet.scales[1].item() > 0.0
    assert packet.payload[:32].eq(0).all() and packet.payload[33:].eq(0).all()
    assert packet.payload[32].item() == 127
