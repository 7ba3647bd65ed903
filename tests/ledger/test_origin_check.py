"""Where an overlapped round started (ledger.judge.origin_check): a node's real rounds on the
overlap schedule's arithmetic (trainer.round.diloco, its boundary store) start from a point the
ledger recomputes bit for bit from the last round's committed state; any other start fails."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ledger.judge.origin_check import PreviousRound, check_origin
from protocol.blobs import decode_blob
from reference.model import GPT, GPTConfig
from reference.outer import OuterState
from trainer.network.comm import SoloAverager
from trainer.round.boundaries import BoundaryStore
from trainer.round.diloco import DiLoCo
from trainer.round.runconfig import RunConfig

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=16, seq_len=8)
Tensors = dict[str, torch.Tensor]


def _served(store: BoundaryStore, r: int, index: int) -> Tensors:
    blob = store.serve(r, index).blob
    return dict(decode_blob(blob, max_bytes=len(blob)))


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Round 1 from the base; round 2 from the base less round 1's progress while round 1 is in
    flight (trainer.round.overlap.Overlap.worked); round 1 then lands (round 2's attested base);
    and a round 2 started from twice that progress (a lie)."""
    store = BoundaryStore(tmp_path_factory.mktemp("node"))
    model = GPT(SMALL, seed=3)
    diloco = DiLoCo(model, OuterState.from_model(model))
    settings = RunConfig.make(inner_steps=4, batch_size=2, trace_interval=2,
                              wire_format="int8").settings  # fmt: skip
    gen = torch.Generator().manual_seed(4)
    rows = [torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=gen) for _ in range(2)]
    layout = diloco.state.layout
    base1 = layout.unflatten(diloco.state.base.clone())
    w1 = diloco.train_local(rows[0], settings, keep=store.keeper(1))
    assert w1.trace is not None
    store.finish(1, w1.trace)
    start2 = diloco.state.base - w1.pseudo_gradient  # Overlap.worked's S_2
    w2 = diloco.train_local(rows[1], settings, start=start2, keep=store.keeper(2))
    assert w2.trace is not None
    store.finish(2, w2.trace)
    lie = diloco.state.base - 2 * w1.pseudo_gradient
    w3 = diloco.train_local(rows[1], settings, start=lie, keep=store.keeper(3))
    assert w3.trace is not None
    store.finish(3, w3.trace)
    diloco.finish_round(w1, SoloAverager(), settings)  # round 1 lands: round 2's attested base
    base2 = layout.unflatten(diloco.state.base.clone())
    store.close()
    prev = PreviousRound(base1, _served(store, 1, 0), _served(store, 1, 2))
    return {"store": store, "base1": base1, "base2": base2, "prev": prev}


def test_a_lockstep_round_starts_from_its_attested_base(overlapped: dict[str, Any]) -> None:
    store = overlapped["store"]
    verdict = check_origin(_served(store, 1, 0), overlapped["base1"])
    assert verdict.passed and verdict.schedule == "lockstep", verdict.reason
    assert not check_origin(_served(store, 1, 0), overlapped["base2"]).passed


def test_an_overlapped_round_starts_from_the_last_rounds_committed_state(
    overlapped: dict[str, Any],
) -> None:
    store, prev = overlapped["store"], overlapped["prev"]
    origin = _served(store, 2, 0)
    alone = check_origin(origin, overlapped["base2"])
    assert not alone.passed, "without the last round an overlapped start cannot be told honest"
    verdict = check_origin(origin, overlapped["base2"], prev)
    assert verdict.passed and verdict.schedule == "overlap", verdict.reason


def test_a_start_that_is_neither_fails(overlapped: dict[str, Any]) -> None:
    store, prev = overlapped["store"], overlapped["prev"]
    verdict = check_origin(_served(store, 3, 0), overlapped["base2"], prev)
    assert not verdict.passed and "neither its attested base" in verdict.reason
