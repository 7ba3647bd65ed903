"""The outer state of a node of several ranks, chunk by chunk (no processes): bit-equal to the
single-process outer step and checkpoint, and the bad inputs refused by name."""

from __future__ import annotations

import itertools

import pytest
import torch

from protocol.errors import ConfigError
from reference.checkpoint import RoundCheckpoint
from reference.outer import FlatLayout, OuterConfig, OuterState
from trainer.round.sharded import local_rows
from trainer.round.sharded_state import ShardOuterState, ShardRange
from trainer.round.sharded_world import placement

CFG = OuterConfig(lr=0.7, momentum=0.9)


def _state(numel: int = 1001, seed: int = 0) -> OuterState:
    gen = torch.Generator().manual_seed(seed)
    layout = FlatLayout({"a.weight": torch.Size([7, 11]), "b": torch.Size([numel - 77])})
    base = torch.randn(numel, generator=gen)
    return OuterState(layout, base, torch.randn(numel, generator=gen) * 1e-2)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_chunked_outer_steps_are_the_single_process_step_bit_for_bit(world: int) -> None:
    full = _state()
    shards = [ShardOuterState.of(full, r, world) for r in range(world)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        g = torch.randn(full.layout.numel, generator=gen) * 1e-3
        full.step(g, CFG)
        for s in shards:
            s.step(g, CFG)
    base = torch.cat([s.base for s in shards])
    momentum = torch.cat([s.momentum for s in shards])
    assert torch.equal(base.view(torch.int32), full.base.view(torch.int32))
    assert torch.equal(momentum.view(torch.int32), full.momentum.view(torch.int32))
    # the checkpoint put together from the chunks is the single-process file, byte for byte
    joined = OuterState(full.layout, base, momentum)
    assert RoundCheckpoint.of(joined, 3).to_bytes() == RoundCheckpoint.of(full, 3).to_bytes()
    assert sum(s.nbytes() for s in shards) == 8 * full.layout.numel


def test_a_checkpoint_of_one_size_loads_into_another() -> None:
    full = _state()
    two = [ShardOuterState.of(full, r, 2) for r in range(2)]
    joined = OuterState(full.layout, torch.cat([s.base for s in two]),
                        torch.cat([s.momentum for s in two]))  # fmt: skip
    four = [ShardOuterState.of(joined, r, 4) for r in range(4)]
    assert torch.equal(torch.cat([s.base for s in four]), full.base)


def test_bf16_momentum_is_held_in_bf16_and_close_to_fp32() -> None:
    full = _state()
    half = ShardOuterState.of(full, 0, 1, bf16_momentum=True)
    assert half.momentum.dtype == torch.bfloat16
    assert half.nbytes() == 6 * full.layout.numel
    g = torch.randn(full.layout.numel) * 1e-3
    full.step(g, CFG)
    half.step(g, CFG)
    assert not torch.equal(half.base, full.base)  # rounded momentum: not bit-equal
    assert torch.allclose(half.base, full.base, atol=1e-4)


def test_shard_ranges_cover_the_vector_once() -> None:
    for numel, world in ((10, 3), (5, 8), (1001, 4)):
        spans = [(ShardRange(r, world, numel).start, ShardRange(r, world, numel).end)
                 for r in range(world)]  # fmt: skip
        assert spans[0][0] == 0 and spans[-1][1] == numel
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_bad_shapes_and_ranks_are_refused_by_name() -> None:
    full = _state()
    with pytest.raises(ConfigError, match="local rank 2 is not in a node of 2"):
        ShardRange(2, 2, 10)
    s = ShardOuterState.of(full, 0, 2)
    with pytest.raises(ConfigError, match="neither the model's 1001"):
        s.step(torch.zeros(17), CFG)
    with pytest.raises(ConfigError, match="shard holds 501 values"):
        ShardOuterState(full.layout, s.shard, torch.zeros(3))
    with pytest.raises(ConfigError, match="rank 9 is outside"):
        placement(9, [1, 2, 4])


def test_each_rank_takes_its_part_of_every_steps_batch() -> None:
    rows = torch.arange(24).view(12, 2)  # 3 steps of 4 rows
    parts = [local_rows(rows, 4, 3, r, 2) for r in range(2)]
    assert parts[0][:, 0].tolist() == [0, 2, 8, 10, 16, 18]
    assert parts[1][:, 0].tolist() == [4, 6, 12, 14, 20, 22]
    with pytest.raises(ConfigError, match="batch size 4 does not split over 3 local ranks"):
        local_rows(rows, 4, 3, 0, 3)
    with pytest.raises(ConfigError, match="12 rows do not fill 4 inner steps"):
        local_rows(rows, 4, 4, 0, 2)
    assert [placement(r, [1, 2, 4]) for r in (0, 1, 2, 3, 6)] == [(0, 0), (1, 0), (1, 1),
                                                                  (2, 0), (2, 3)]  # fmt: skip
