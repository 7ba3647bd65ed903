"""A node joins mid-run and fetches the checkpoint peer to peer from the members, one of which
serves every chunk altered under an honest signed manifest: real node processes, real gloo
groups, real sockets. The joiner drops the dishonest member, takes the chunks from the honest one
and trains with the others from exactly their weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.keys import NodeKey
from tests.trainer.nodes import DEV_KEYS, Plan, collect, start_nodes

pytestmark = pytest.mark.distributed


def test_a_joiner_fetches_peer_to_peer_and_refuses_a_corrupted_peer(
    corpus_dir: Path, store_port: int
) -> None:
    dishonest = NodeKey.from_private_key(bytes.fromhex(DEV_KEYS[1][2:])).address
    plans = [
        Plan(key=0, rounds=3, min_nodes=2, chunk_bytes=4096),
        Plan(key=1, rounds=3, min_nodes=2, chunk_bytes=4096, serve_corrupt=True),
        Plan(key=2, rounds=3, join_after_round=1, chunk_bytes=4096),
    ]
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0]
    results = out["results"]
    joined = [rec["round"] for rec in results[2]]
    assert joined and max(joined) == 3, "the joiner trained with the others"
    for r in joined:  # it started from exactly the members' weights
        hashes = {rec["result_checkpoint"] for recs in results.values() for rec in recs
                  if rec["round"] == r}  # fmt: skip
        assert len(hashes) == 1, (r, hashes)
    caught = [key for check, key in out["refusals"][2] if check == "hash_mismatch"]
    assert caught and all(f"/{dishonest}#chunk" in key for key in caught), out["refusals"][2]
    assert not [k for _, k in out["refusals"][0] + out["refusals"][1] if "#chunk" in k]
