"""The count-sketch's native kernel (reference.codec.native.count_sketch) against the torch
reference (reference.sketch.slots + torch.bincount), bit for bit: the node commits a sketch's
hash and the ledger recomputes it, so one machine's kernel and another's torch must agree."""

from __future__ import annotations

import pytest
import torch

from protocol.hashing import hash_state_dict
from reference.codec import native
from reference.sketch import Projection, make_sketch, sketch_seed, slots
from reference.trace import boundary_state, state_hash

SEED = sketch_seed(bytes(range(32)))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int64)  # NaN compared by its bits, as a hash would


def _reference(x: torch.Tensor, start: int, buckets: int) -> torch.Tensor:
    index = slots(SEED, start, x.numel(), buckets)
    return torch.bincount(index, weights=x.double(), minlength=2 * buckets)


@pytest.mark.parametrize("buckets", [2, 1024, 1 << 16])
@pytest.mark.parametrize("start", [0, 12_345, (1 << 31) - 5_000])
def test_the_native_sums_are_bincounts_bits(start: int, buckets: int) -> None:
    """Any bucket count, offsets up to the largest index (the reference's int64 products, the
    kernel's arithmetic mod 2^32), a length that is no multiple of the kernel's block, and
    values of every scale, subnormals and signed zeros among them."""
    g = torch.Generator().manual_seed(start + buckets)
    n = 4_999
    x = torch.randn(n, generator=g) * torch.logspace(-40, 30, n).float()
    x[::7] = -0.0
    x[::11] = 1e-41  # subnormal
    sub = torch.randn(n, generator=g)
    sums = native.count_sketch([x, x * 3, None], sub, start, SEED, buckets)
    assert torch.equal(_bits(sums[0]), _bits(_reference(sub - x, start, buckets)))
    assert torch.equal(_bits(sums[1]), _bits(_reference(x * 3, start, buckets)))
    assert not sums[2].any()  # a part not given is zeros
    alone = native.count_sketch([x], None, start, SEED, buckets)
    assert torch.equal(_bits(alone[0]), _bits(_reference(x, start, buckets)))


def test_a_value_that_is_not_finite_lands_as_torchs_does() -> None:
    x = torch.randn(3_000)
    x[5], x[2_500] = float("nan"), float("inf")
    sums = native.count_sketch([x], None, 0, SEED, 64)
    assert torch.equal(_bits(sums[0]), _bits(_reference(x, 0, 64)))


def test_a_boundarys_sketch_is_the_same_with_either_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """make_sketch of a real boundary state (weights against a base, AdamW's moments): the same
    committed hash whether the kernel or torch computes it (COLOCO_CODEC picks)."""
    from reference.model import GPT, GPTConfig

    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=48, seq_len=16), seed=5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rows = torch.randint(0, 256, (4, 17), generator=torch.Generator().manual_seed(1))
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(2):
        _, loss = model(rows[:, :-1], rows[:, 1:])
        assert loss is not None
        opt.zero_grad()
        loss.backward()
        opt.step()
    state = boundary_state(model, opt)
    digest = state_hash(state)
    hashes = {}
    for backend in ("torch", "native"):
        monkeypatch.setenv("COLOCO_CODEC", backend)
        hashes[backend] = hash_state_dict(make_sketch(state, base, digest))
    assert hashes["torch"] == hashes["native"]
    # and the kernel really ran: a projection over these shapes takes its path
    monkeypatch.setenv("COLOCO_CODEC", "native")
    proj = Projection.of(digest, {n: t.shape for n, t in base.items()})
    calls: list[int] = []
    real = native.count_sketch

    def counted(*args: object) -> torch.Tensor:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(native, "count_sketch", counted)
    proj.apply(base)
    assert len(calls) == len(base)
