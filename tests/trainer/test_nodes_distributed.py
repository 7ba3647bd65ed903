"""Real nodes in real processes over gloo: identical weights, joins, leaves and a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reference.checkpoint import CheckpointDir
from tests.trainer.nodes import Plan, collect, start_nodes

pytestmark = [pytest.mark.distributed]


def _by_round(results: dict[int, list[dict[str, Any]]]) -> dict[int, dict[int, dict[str, Any]]]:
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for key, records in results.items():
        for rec in records:
            out.setdefault(rec["round"], {})[key] = rec
    return out


def _assert_agree(rounds: dict[int, dict[int, dict[str, Any]]]) -> None:
    for r, recs in rounds.items():
        results = {rec["result_checkpoint"] for rec in recs.values()}
        bases = {rec["base_checkpoint"] for rec in recs.values()}
        assert len(results) == 1, f"round {r}: nodes disagree on the result {results}"
        assert len(bases) == 1, f"round {r}: nodes started from different weights {bases}"
        if r - 1 in rounds:
            (prev,) = {rec["result_checkpoint"] for rec in rounds[r - 1].values()}
            assert bases == {prev}, f"round {r} did not start from round {r - 1}'s result"


def test_three_nodes_hold_identical_weights_after_every_round_int8_wire(
    corpus_dir: Path, store_port: int, tmp_path: Path
) -> None:
    plans = [
        Plan(
            key=k,
            rounds=2,
            min_nodes=3,
            checkpoint_dir=str(tmp_path / f"n{k}"),
            config={"wire_format": "int8"},
        )  # the quantized all-reduce, for real
        for k in range(3)
    ]
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0]
    rounds = _by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    assert all(len(recs) == 3 for recs in rounds.values())
    _assert_agree(rounds)
    # Different shards, different pseudo-gradients; one shared result.
    assert len({rec["data_shard"] for rec in rounds[1].values()}) == 3
    assert len({rec["pseudo_gradient"] for rec in rounds[1].values()}) == 3
    assert rounds[1][0]["bytes_sent"] > 0
    # one gloo group for both rounds: it is rebuilt only when the member list changes
    assert {rec["groups_formed"] for rec in rounds[2].values()} == {1}
    # The checkpoints on disk are the same bits on every node, and match the attested hash.
    ckpts = [CheckpointDir(tmp_path / f"n{k}").load(2) for k in range(3)]
    assert {c.weights_hash.hex() for c in ckpts} == {rounds[2][0]["result_checkpoint"][2:]}
    for name, t in ckpts[0].momentum.items():
        assert all(c.momentum[name].equal(t) for c in ckpts[1:])


def test_a_node_joins_and_another_leaves_between_rounds(corpus_dir: Path, store_port: int) -> None:
    # The third node starts once round 1's member list has closed, so it must enter a later
    # round through live recovery; every boundary waits >= 2 s for joiners, so it makes round 4.
    plans = [
        Plan(key=0, rounds=4, min_nodes=2, join_window_s=2.0),
        Plan(key=1, leave_after=2, min_nodes=2, join_window_s=2.0),
        Plan(key=2, rounds=4, join_after_round=1, join_window_s=2.0),
    ]
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0]
    results = out["results"]
    rounds = _by_round(results)
    assert sorted(rounds) == [1, 2, 3, 4]
    assert set(rounds[1]) == {0, 1}
    assert 1 not in rounds[3] and 1 not in rounds[4], "node 1 left after round 2"
    assert [rec["round"] for rec in results[1]] == [1, 2]
    assert 2 in rounds[4], "the joining node trained the last round"
    first = results[2][0]["round"]
    assert first >= 2
    _assert_agree(rounds)  # the joiner started from exactly the peers' weights


def test_a_node_killed_mid_round_is_dropped_and_the_others_finish(
    corpus_dir: Path, store_port: int
) -> None:
    plans = [
        Plan(key=0, rounds=2, min_nodes=3, collective_timeout_s=6.0),
        Plan(key=1, rounds=2, min_nodes=3, collective_timeout_s=6.0),
        Plan(key=2, rounds=2, min_nodes=3, collective_timeout_s=6.0, die_in_round=2),
    ]
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 17]
    rounds = _by_round(out["results"])
    assert set(rounds[1]) == {0, 1, 2}
    assert set(rounds[2]) == {0, 1}
    for rec in rounds[2].values():
        assert rec["attempts"] == 2, "round 2 was finished by a re-formed group"
        assert len(rec["members"]) == 2
    _assert_agree(rounds)
