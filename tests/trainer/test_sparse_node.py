"""The sparse wire format on the node's path: real nodes train on it, carry their error-feedback
residual across rounds and keep it beside their checkpoint; a rejoin starts from zero."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.blobs import decode_blob
from reference.codec.sparse import SPARSE_SPEC, sparse_wire_bytes
from reference.model import GPT, GPTConfig
from tests.trainer.nodes import Plan, collect, start_nodes
from trainer.round.residual import FILE, Residuals


@pytest.mark.distributed
def test_two_nodes_train_on_sparse_packets_and_keep_their_residuals(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    plans = [Plan(key=k, rounds=2, min_nodes=2, checkpoint_dir=str(tmp_path / f"n{k}"),
                  config={"wire_format": "sparse"}) for k in range(2)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0], out["errors"]
    by_round = {r: [rec for k in (0, 1) for rec in out["results"][k] if rec["round"] == r]
                for r in (1, 2)}  # fmt: skip
    for r, recs in by_round.items():
        assert len(recs) == 2 and len({rec["result_checkpoint"] for rec in recs}) == 1, (r, recs)
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, seq_len=32)  # tests.trainer.nodes' model
    numel = sum(p.numel() for p in GPT(model).parameters())
    packet = sparse_wire_bytes(numel, SPARSE_SPEC)
    assert {rec["bytes_sent"] for rec in by_round[2]} == {packet + 8}  # one packet, one weight
    residuals = []
    for k in range(2):
        saved = decode_blob((tmp_path / f"n{k}" / FILE).read_bytes(), max_bytes=1 << 30)
        assert int(saved["round"].item()) == 2
        residuals.append(saved["residual"])
        assert residuals[-1].numel() == numel and bool(residuals[-1].abs().sum() > 0)
    assert not torch.equal(residuals[0], residuals[1]), "each node carries its own residual"


@pytest.mark.distributed
def test_sparse_packets_on_the_overlap_schedule(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    """The delayed outer step: round r trains from round r-1's residual while r-1 is in flight;
    every round lands with one result and the residual saved is the landed round's."""
    plans = [Plan(key=k, rounds=3, min_nodes=2, checkpoint_dir=str(tmp_path / f"n{k}"),
                  overlap=True, config={"wire_format": "sparse"}) for k in range(2)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0], out["errors"]
    for r in (1, 2, 3):
        recs = [rec for k in (0, 1) for rec in out["results"][k] if rec["round"] == r]
        assert len(recs) == 2 and len({rec["result_checkpoint"] for rec in recs}) == 1, (r, recs)
    for k in range(2):
        saved = decode_blob((tmp_path / f"n{k}" / FILE).read_bytes(), max_bytes=1 << 30)
        assert int(saved["round"].item()) == 3


def test_a_residual_goes_with_the_state_it_belongs_to(tmp_path: Path) -> None:
    res = Residuals(tmp_path)
    r1, r2 = torch.full((8,), 1.0), torch.full((8,), 2.0)
    res.made(1, r1)
    assert res.before(2) is r1 and res.before(1) is None
    res.landed_round(1)
    res.made(2, r2)  # round 2 lost (left out): its residual must not follow round 2's state
    res.adopt(2)
    assert res.before(3) is None, "a round this node did not land gives a zero residual"
    res.adopt(1)  # a restart from its own checkpoint of round 1: read back from disk
    restored = res.before(2)
    assert restored is not None and torch.equal(restored, r1)
    fresh = Residuals(tmp_path)  # a new process, its checkpoint of round 1
    fresh.adopt(1)
    assert fresh.before(2) is not None
    fresh.adopt(5)  # a rejoin from a peer's checkpoint of round 5
    assert fresh.before(6) is None
    fresh.made(6, r2)
    fresh.drop()  # evicted: nothing it carried is kept
    assert fresh.before(7) is None
