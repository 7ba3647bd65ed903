"""The node's BoundaryStore: a round's boundary states kept and served against the signed root,
pruned after the audit window and under a disk bound, an altered file refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from protocol.blobs import decode_blob, encode_blob
from protocol.errors import TrainerError
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.trace import TraceBuilder, check_served
from trainer.round.boundaries import BoundaryStore

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=16)


def _round(store: BoundaryStore, r: int) -> bytes:
    model = GPT(SMALL, seed=r)
    inner = InnerTrainer(model, InnerConfig(steps=4, lr=3e-3, batch_size=2))
    builder = TraceBuilder(model, dict(model.named_parameters()),
                           optimizer=lambda: inner._opt, keep=store.keeper(r))  # fmt: skip
    rows = torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=torch.Generator().manual_seed(r))
    inner.train(rows, on_boundary=builder, trace_interval=2)
    trace = builder.trace()
    store.finish(r, trace)
    return bytes(trace.root)


def test_a_kept_round_is_served_against_its_root(tmp_path: Path) -> None:
    store = BoundaryStore(tmp_path)
    root = _round(store, 1)
    assert store.rounds() == [1]
    for index, step in enumerate((0, 2, 4)):
        served = store.serve(1, index)
        assert served.root == root and served.boundary.step == step
        state = decode_blob(served.blob, max_bytes=len(served.blob))
        check_served(root, index, step, state, served.boundary.sketch_hash, served.proof)
    with pytest.raises(TrainerError, match="no boundary states kept"):
        store.serve(7, 0)


def test_an_altered_file_is_refused(tmp_path: Path) -> None:
    store = BoundaryStore(tmp_path)
    _round(store, 1)
    served = store.serve(1, 2)
    state = decode_blob(served.blob, max_bytes=len(served.blob))
    name = next(n for n in state if n.startswith("weights/"))
    state[name] = state[name] + 1.0
    (store.root / "00000001" / "0002.safetensors").write_bytes(encode_blob(state))
    with pytest.raises(TrainerError, match="altered"):
        store.serve(1, 2)


def test_rounds_past_the_audit_window_and_over_the_disk_bound_are_pruned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = BoundaryStore(tmp_path, keep_rounds=2)
    for r in (1, 2, 3):
        _round(store, r)
    assert store.rounds() == [2, 3]  # round 1 left the window when round 3 was stored
    one_round = store.size() // 2
    tight = BoundaryStore(tmp_path, keep_rounds=10, max_bytes=one_round + one_round // 2)
    with caplog.at_level(logging.WARNING, logger="trainer.round.boundaries"):
        _round(tight, 4)
    assert tight.rounds() == [4], "the oldest went first; the newest is never pruned"
    assert "removed before its audit window closed" in caplog.text
