"""The node's answer to a bisection's probe (trainer.round.boundaries.BoundaryStore.state_at):
the state inside a segment recomputed from the kept boundary before it, the same bits as the
node's own training on the same threads; a step outside that segment is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.errors import TrainerError
from reference.segment import STEP
from reference.trace import state_hash
from tests.ledger.test_bisect import K, kept_round, node_advance


def test_a_probe_is_recomputed_from_the_boundary_before_it(tmp_path: Path) -> None:
    from trainer.round.boundaries import BoundaryStore

    store = BoundaryStore(tmp_path)
    advance = node_advance(None)
    trace, _ = kept_round(store, advance)
    calls: list[tuple[int, int]] = []

    def counting(r: int, state: dict[str, torch.Tensor], first: int, n: int):  # type: ignore[no-untyped-def]
        calls.append((first, n))
        return advance(r, state, first, n)

    mid = store.state_at(1, 0, 3, counting)
    assert calls == [(0, 3)] and float(mid[STEP]) == 3
    # recomputed to the segment's end, it is the committed end state, bit for bit
    end = store.state_at(1, 0, K, advance)
    assert state_hash(end) == trace.boundaries[1].state_hash
    # the boundary itself needs no steps
    assert state_hash(store.state_at(1, 0, 0, counting)) == trace.boundaries[0].state_hash
    assert calls == [(0, 3)]
    with pytest.raises(TrainerError, match="not inside the segment"):
        store.state_at(1, 1, 3, advance)
    with pytest.raises(TrainerError, match=r"boundaries 0\.\.1, not 5"):
        store.state_at(1, 5, 3, advance)
    with pytest.raises(TrainerError, match="no boundary states kept"):
        store.state_at(2, 0, 3, advance)
