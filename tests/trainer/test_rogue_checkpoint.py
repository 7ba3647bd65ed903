"""A rogue offers a poisoned checkpoint (with its matching hash in ``ckpt/latest``, unsigned or
signed by its unregistered key) to a node joining mid-run: the joiner refuses the advertisement,
fetches peer to peer only from members whose signed hash a majority of the round shares, and
starts from exactly their weights. (A member serving bad chunks: test_peer_checkpoint_nodes.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.nodes import collect, start_nodes
from tests.trainer.rogue import OnChain, assert_agree, by_round, on_chain, start_rogue, stop_rogue

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]


def test_rogue_poisoned_checkpoint_is_refused_and_fetched_elsewhere(
    chain: Any, deployment: Any, tmp_path: Path, corpus_dir: Path, store_port: int
) -> None:
    run: OnChain = on_chain(chain, deployment, tmp_path, data=corpus_dir)
    first = min(run.addresses[:2])  # rank 0 of the first two: its copy is the first one tried
    plans = [run.plan(0, rounds=3, min_nodes=2), run.plan(1, rounds=3, min_nodes=2),
             run.plan(2, rounds=3, join_after_round=1)]  # fmt: skip
    rogue = start_rogue("poison", store_port, run.info(honest=run.addresses[:2], target=first))
    try:
        out = collect(*start_nodes(plans, store_port, corpus_dir))
    finally:
        stop_rogue(rogue)
    assert out["exit_codes"] == [0, 0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2, 3]
    joined = [rec["round"] for rec in out["results"][2]]
    assert joined and max(joined) == 3, "the joiner trained with the others"
    assert_agree(rounds)  # it started from exactly their weights, not the rogue's
    refused = out["refusals"][2]
    latest = {check for check, key in refused if key == "ckpt/latest"}
    assert latest <= {"unsigned", "foreign"}, refused
    assert not [key for check, key in refused if check == "hash_mismatch"], refused
