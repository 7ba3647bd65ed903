"""The sparse wire format (reference.codec.sparse): top-k choice, value bounds, exact bytes,
determinism, error feedback, order-free averaging, and refusal of malformed peer packets."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from protocol.errors import ConfigError, TrainerError
from reference.codec.sparse import (
    SparsePacket,
    SparseSpec,
    average_sparse,
    compress,
    decode_sparse,
    encode_sparse,
    sparse_wire_bytes,
)

SPECS = [
    SparseSpec(4096, 64, 2),
    SparseSpec(256, 4, 2),
    SparseSpec(1024, 16, 4),
    SparseSpec(64, 8, 8),
]


def _x(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 63, 5000, 70_001])
def test_sparse_keeps_the_top_k_of_each_chunk_within_half_a_step(spec: SparseSpec, n: int) -> None:
    x = _x(n) * torch.exp(_x(n, 1))  # magnitudes spread over orders
    packet = encode_sparse(x, spec)
    d = decode_sparse(packet)
    pad = torch.zeros(spec.chunks(n) * spec.chunk)
    pad[:n] = x
    rows, drow = pad.view(-1, spec.chunk), torch.zeros_like(pad)
    drow[:n] = d
    drow = drow.view(-1, spec.chunk)
    for c, (row, dr) in enumerate(zip(rows, drow, strict=True)):
        valid = min(spec.chunk, n - c * spec.chunk)
        kept = dr[:valid] != 0
        assert int(kept.sum()) == min(spec.k, valid)
        if valid > spec.k:  # every kept magnitude >= every dropped one
            assert row[:valid][kept].abs().min() >= row[:valid][~kept].abs().max()
        step = float(packet.scales[c])
        assert step == pytest.approx(float(row.abs().max()) / (spec.levels - 0.5), rel=1e-6)
        err = (dr[:valid][kept] - row[:valid][kept]).abs().max()
        assert float(err) <= step / 2 * (1 + 1e-5)


def test_sparse_ties_go_to_the_lower_offset_and_zero_chunks_decode_to_zero() -> None:
    spec = SparseSpec(64, 4, 2)
    x = torch.ones(128)
    x[64:] = 0.0
    packet = encode_sparse(x, spec)
    assert packet.offsets().tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert float(packet.scales[1]) == 0.0
    d = decode_sparse(packet)
    assert d[:4].tolist() == [1.0] * 4 and bool((d[4:] == 0).all())


@pytest.mark.parametrize("spec", SPECS)
def test_sparse_byte_counts_are_exact(spec: SparseSpec) -> None:
    for n in (1, spec.chunk, spec.chunk + 1, 119_424):
        packet = encode_sparse(_x(n), spec)
        chunks = -(-n // spec.chunk)
        index = 1 if spec.chunk <= 256 else 2
        want = chunks * (spec.k * index + spec.k * spec.bits // 8 + 4)
        assert packet.nbytes == sparse_wire_bytes(n, spec) == want
        assert packet.payload.numel() + 4 * packet.scales.numel() == want
    # the default shape: 1.5625 % of the values at 2 bits, ~28x under int8 for the tiny model
    assert sparse_wire_bytes(119_424, SparseSpec()) == 30 * (128 + 16 + 4)


def test_sparse_bytes_are_the_same_at_any_thread_count() -> None:
    x, r = _x(300_000, 5), _x(300_000, 6) * 0.1
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            packet, residual = compress(x, r, SparseSpec(), 0.9)
            out.append((packet.payload.clone(), packet.scales.clone(), residual.clone()))
    finally:
        torch.set_num_threads(before)
    for p, s, res in out[1:]:
        assert torch.equal(p, out[0][0]) and torch.equal(
            s.view(torch.int32), out[0][1].view(torch.int32)
        )
        assert torch.equal(res.view(torch.int32), out[0][2].view(torch.int32))


def test_error_feedback_sends_a_coordinate_that_never_makes_top_k_alone() -> None:
    spec = SparseSpec(64, 4, 8)
    update = torch.zeros(64)
    update[:4] = 10.0  # always the top 4
    update[10] = 0.5  # alone never in the top 4; its residual grows 0.5 a round
    residual, sent, total_decoded = None, None, torch.zeros(64)
    for rnd in range(1, 41):
        packet, residual = compress(update, residual, spec, beta=1.0)
        total_decoded += decode_sparse(packet)
        if 10 in packet.offsets()[0].tolist():
            sent = rnd
            break
    assert sent is not None and sent > 15, "coordinate 10 must wait for its residual to grow"
    assert residual is not None
    assert float(total_decoded[10]) > 0
    # beta 1: what was sent plus what is carried is everything that was added
    assert torch.allclose(total_decoded + residual, update * sent, rtol=1e-5, atol=1e-4)
    # without error feedback (residual dropped every round) it is never sent
    for _ in range(40):
        packet, _ = compress(update, None, spec, beta=1.0)
        assert 10 not in packet.offsets()[0].tolist()


def test_error_feedback_decays_the_residual_by_beta() -> None:
    spec = SparseSpec(64, 4, 2)
    u, r = _x(64, 1), _x(64, 2)
    packet, new = compress(u, r, spec, beta=0.5)
    acc = r * torch.tensor(0.5) + u
    assert torch.equal(packet.payload, encode_sparse(acc, spec).payload)
    assert torch.equal(new, acc - decode_sparse(packet))


def _packets(n: int = 5000) -> list[SparsePacket]:
    """Half of each chunk kept, magnitudes far apart: fp32 sums that depend on their order."""
    scale = (1.0, 3e3, 1e-3, 7.0)
    return [encode_sparse(_x(n, 10 + i) * scale[i], SparseSpec(256, 128, 8)) for i in range(4)]


@pytest.mark.parametrize("weights", [None, [3, 1, 7, 2]])
def test_sparse_average_is_bit_identical_in_any_order(weights: list[int] | None) -> None:
    packets = _packets()
    ref = average_sparse(packets, weights)
    for perm in itertools.permutations(range(4)):
        ws = None if weights is None else [weights[i] for i in perm]
        assert torch.equal(average_sparse([packets[i] for i in perm], ws).view(torch.int32),
                           ref.view(torch.int32))  # fmt: skip
    # the same bits as the dense computation, in digest order: sum(decode * w) / sum(w)
    ws = weights or [1] * 4
    order = sorted(range(4), key=lambda i: (packets[i].digest(), ws[i]))
    acc = torch.zeros(5000)
    for i in order:
        dense = decode_sparse(packets[i])
        acc += dense * torch.tensor(float(ws[i])) if weights is not None else dense
    assert torch.equal(acc / torch.tensor(float(sum(ws))), ref)


def test_the_mean_of_one_packet_is_its_decode_whatever_its_weight() -> None:
    """A one-member round: the node decodes its packet (trainer.network.allreduce); the ledger's
    mean must be those bits. ``(v x w) / w`` in fp32 is not ``v`` for every v (a real one-node
    sparse run: 491 of 119,424 values 1 ulp off, its result never confirmed)."""
    (packet,) = _packets()[:1]
    weighted = [decode_sparse(packet) * torch.tensor(w) / torch.tensor(w) for w in (6400.0, 3.0)]
    assert any(not torch.equal(v, decode_sparse(packet)) for v in weighted)  # what it guards
    for w in (None, [6400], [3], [1]):
        assert torch.equal(average_sparse([packet], w), decode_sparse(packet)), w


def test_sparse_average_refuses_mixed_specs_and_bad_weights() -> None:
    a = encode_sparse(_x(5000), SparseSpec(1024, 16, 2))
    b = encode_sparse(_x(5000), SparseSpec(1024, 16, 4))
    with pytest.raises(TrainerError, match="governed format"):
        average_sparse([a, b])
    with pytest.raises(TrainerError, match="positive weights"):
        average_sparse([a, a], [1, 0])


def _forge(packet: SparsePacket, **kw: torch.Tensor) -> SparsePacket:
    return SparsePacket(packet.spec, packet.numel, kw.get("payload", packet.payload),
                        kw.get("scales", packet.scales))  # fmt: skip


def test_malformed_sparse_packets_are_refused() -> None:
    good = encode_sparse(_x(3000), SparseSpec(1024, 16, 2))
    idx = good.payload.clone()
    idx[0:2] = torch.tensor([0, 4], dtype=torch.uint8)  # offset 1024 in a chunk of 1024
    with pytest.raises(TrainerError, match="offset >= chunk size"):
        _forge(good, payload=idx)
    dup = good.payload.clone()
    dup[2:4] = dup[0:2]  # offsets 0 and 1 of chunk 0 equal
    with pytest.raises(TrainerError, match="duplicate or unordered"):
        _forge(good, payload=dup)
    swapped = good.payload.clone()
    swapped[0:2], swapped[2:4] = good.payload[2:4].clone(), good.payload[0:2].clone()
    with pytest.raises(TrainerError, match="duplicate or unordered"):
        _forge(good, payload=swapped)
    with pytest.raises(TrainerError, match="uint8 payload of"):
        _forge(good, payload=good.payload[:-1])
    with pytest.raises(TrainerError, match="uint8 payload of"):
        _forge(good, payload=good.payload.to(torch.int16))
    with pytest.raises(TrainerError, match="fp32 steps"):
        _forge(good, scales=good.scales[:-1])
    for bad in (-1.0, float("nan"), float("inf")):
        sc = good.scales.clone()
        sc[1] = bad
        with pytest.raises(TrainerError, match="negative, NaN or Inf step"):
            _forge(good, scales=sc)
    with pytest.raises(TrainerError, match="uint8 payload of"):
        SparsePacket(replace(good.spec, k=32), good.numel, good.payload, good.scales)


def test_sparse_spec_and_input_errors_say_what_to_change() -> None:
    with pytest.raises(ConfigError, match="power of two"):
        SparseSpec(1000, 16, 2)
    with pytest.raises(ConfigError, match="whole number of bytes"):
        SparseSpec(4096, 3, 2)
    with pytest.raises(ConfigError, match="value bits"):
        SparseSpec(4096, 64, 3)
    x = _x(100)
    x[7] = float("nan")
    with pytest.raises(TrainerError, match="NaN or Inf"):
        encode_sparse(x, SparseSpec(64, 4, 2))
    with pytest.raises(TrainerError, match="residual"):
        compress(_x(100), torch.zeros(99), SparseSpec(64, 4, 2), 0.9)
    with pytest.raises(ConfigError, match="beta"):
        compress(_x(100), None, SparseSpec(64, 4, 2), 1.5)


@pytest.mark.parametrize("spec", [*SPECS, SparseSpec(256, 16, 2), SparseSpec(64, 64, 2)])
def test_the_native_kernel_gives_the_torch_references_bytes(spec: SparseSpec) -> None:
    cases = {
        "spread": lambda n: _x(n) * torch.exp(_x(n, 1)),
        "ties": lambda n: torch.randint(-3, 4, (n,), generator=torch.Generator()).float(),
        "zeros": torch.zeros,
        "tiny": lambda n: _x(n) * 1e-35,
        "huge": lambda n: _x(n) * 1e30,
    }
    for (name, make), n in itertools.product(cases.items(), [1, 63, 65, 257, 5000, 70_001]):
        x = make(n)
        ref, nat = encode_sparse(x, spec, backend="torch"), encode_sparse(x, spec, backend="native")
        assert torch.equal(ref.payload, nat.payload), (name, n)
        assert torch.equal(ref.scales, nat.scales), (name, n)
    bad = _x(1000)
    bad[777] = float("inf")
    with pytest.raises(TrainerError, match="NaN or Inf"):
        encode_sparse(bad, spec, backend="native")
