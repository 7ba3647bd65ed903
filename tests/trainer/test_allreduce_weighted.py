"""Token-weighted all-reduce over real gloo processes: same bits as the one-process replay."""

from __future__ import annotations

import hashlib

import pytest
import torch

from reference.codec import WireFormat, quantize
from reference.mean import simulate_average
from tests.harness.distributed import run_workers
from trainer.network.allreduce import average

pytestmark = pytest.mark.distributed

N = 20_011
WORLD = 3
TOKENS = [6400, 2048, 6400]  # rank 1 ran a third of the steps


def _vector(rank: int) -> torch.Tensor:
    return torch.randn(N, generator=torch.Generator().manual_seed(50 + rank))


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _worker(rank: int, world: int) -> dict[str, tuple[str, int]]:
    out = {}
    for fmt in ("fp32", "int8"):
        mean, sent = average(_vector(rank), None, fmt, 30.0, weight=TOKENS[rank])
        out[fmt] = (_digest(mean), sent)
    return out


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, tuple[str, int]]]:
    return run_workers(_worker, WORLD, timeout=240)


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_weighted_mean_is_identical_on_every_rank_and_replays_from_packets(
    ranks: list[dict[str, tuple[str, int]]], fmt: str
) -> None:
    digests = {r[fmt][0] for r in ranks}
    assert len(digests) == 1
    packets = [quantize(_vector(r), fmt) for r in range(WORLD)]
    replay = simulate_average(packets, fmt, weights=TOKENS)
    assert _digest(replay) == digests.pop()


def test_weights_move_the_mean_toward_the_heavier_ranks() -> None:
    vectors = [_vector(r) for r in range(WORLD)]
    weighted = simulate_average(vectors, "fp32", weights=TOKENS)
    exact = sum(v * t for v, t in zip(vectors, TOKENS, strict=True)) / sum(TOKENS)
    torch.testing.assert_close(weighted, exact)
    plain = simulate_average(vectors, "fp32")
    assert not torch.allclose(weighted, plain, atol=1e-3)


def test_int8_weighted_mean_is_close_to_the_exact_weighted_mean() -> None:
    vectors = [_vector(r) for r in range(WORLD)]
    exact = sum(v * t for v, t in zip(vectors, TOKENS, strict=True)) / sum(TOKENS)
    got = simulate_average(vectors, WireFormat.INT8, weights=TOKENS)
    assert float((got - exact).norm() / exact.norm()) < 0.02
