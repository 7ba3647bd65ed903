"""NodeRunner's bounded overlap (trainer.round.bounded) over real gloo processes: round r's
exchange runs during round r+1's first segment and lands at its first boundary. What it shares
with the one-round delay (the lockstep bits of round 1, a peer dying with a round in flight, a
joiner) is tested on both in tests/trainer/test_overlap_nodes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.nodes import Plan, collect, start_nodes
from tests.trainer.test_nodes_distributed import _assert_agree, _by_round

pytestmark = [pytest.mark.distributed]
# 6 inner steps, a boundary every 3: round r lands after 3 steps of round r+1
CONFIG = {"inner_steps": 6, "trace_interval": 3, "wire_format": "int8"}


def test_a_node_evicted_while_landing_loses_the_round_it_trains_and_rejoins(
    corpus_dir: Path, store_port: int
) -> None:
    """Node 1's outer step of round 1 gives other bits (a faulty machine): the hash check at the
    landing, 3 steps into round 2, evicts it. It loses round 2 too (the round it was training
    from the state it lost), drops its state and rejoins round 3 from a peer's checkpoint; the
    majority land round 1 and train on."""
    plans = [Plan(key=k, rounds=3, min_nodes=3, bounded_overlap=True, config=CONFIG,
                  collective_timeout_s=15.0, diverge_in_round=1 if k == 1 else None)
             for k in range(3)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0], out["errors"]
    rounds = _by_round(out["results"])
    assert sorted(rounds[1]) == [0, 2], "the divergent node's round 1 is not reported"
    assert sorted(rounds[2]) == [0, 2], "nor the round it trained while it landed round 1"
    assert sorted(rounds[3]) == [0, 1, 2], "it rejoined round 3 from a peer's checkpoint"
    _assert_agree(rounds)


def test_a_node_that_leaves_lands_its_last_round_without_holding_the_others_up(
    corpus_dir: Path, store_port: int
) -> None:
    """Node 2 leaves after round 2, with round 2 in flight: it says so before landing it, so the
    others' round 3 list opens without waiting for its join (before, their list waited for it
    until the rendezvous timeout while it waited for them to land round 2), and they land round
    2 with it."""
    plans = [Plan(key=k, rounds=3, min_nodes=2, bounded_overlap=True, config=CONFIG,
                  rendezvous_timeout_s=20.0, leave_after=2 if k == 2 else None)
             for k in range(3)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0], out["errors"]
    assert out["timeouts"] == {0: [], 1: [], 2: []}, f"a list opened at the timeout: {out}"
    rounds = _by_round(out["results"])
    assert sorted(rounds[2]) == [0, 1, 2], "the leaver's last round landed with it"
    assert sorted(rounds[3]) == [0, 1]
    _assert_agree(rounds)
