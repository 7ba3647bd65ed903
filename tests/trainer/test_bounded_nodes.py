"""NodeRunner's bounded overlap (trainer.round.bounded) over real gloo processes: round r's
exchange runs during round r+1's first segment and lands at its first boundary."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from protocol.devnet import free_port
from tests.trainer.nodes import Plan, collect, start_nodes
from tests.trainer.test_nodes_distributed import _assert_agree, _by_round

pytestmark = [pytest.mark.distributed]
# 6 inner steps, a boundary every 3: round r lands after 3 steps of round r+1
CONFIG = {"inner_steps": 6, "trace_interval": 3, "wire_format": "int8"}


@pytest.fixture
def second_store() -> Iterator[int]:
    """Another coordinator store, for a second run in the same test."""
    port = free_port()
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    yield port
    del store


def _run(plans: list[Plan], port: int, corpus_dir: Path) -> dict[int, dict[int, dict[str, Any]]]:
    out = collect(*start_nodes(plans, port, corpus_dir))
    assert out["exit_codes"] == [0] * len(plans), out["errors"]
    return _by_round(out["results"])


def test_round_r_lands_at_round_r_plus_1s_first_boundary_with_the_lockstep_bits(
    corpus_dir: Path, store_port: int, second_store: int
) -> None:
    """Round 1 starts from the base and its average lands on the same base as in lockstep: the
    lockstep run's bits. Round 2 starts from each node's own end of round 1 and moves to the new
    base at step 3, so later rounds differ from lockstep; every member holds the same weights,
    each round's attested base is the last round's attested result, and a round's packet is
    measured from that base (what the ledger checks)."""
    common = {"rounds": 3, "min_nodes": 2, "config": CONFIG}
    plain = _run([Plan(key=k, **common) for k in range(2)], store_port, corpus_dir)  # type: ignore[arg-type]
    bounded = _run(
        [Plan(key=k, bounded_overlap=True, **common) for k in range(2)],  # type: ignore[arg-type]
        second_store,
        corpus_dir,
    )
    assert sorted(bounded) == [1, 2, 3]  # the last round landed before the nodes left
    assert all(len(recs) == 2 for recs in bounded.values())
    _assert_agree(bounded)
    _assert_agree(plain)

    def field(rounds: dict[int, dict[int, dict[str, Any]]], r: int, name: str) -> str:
        return str(rounds[r][0]["attestation"][name])

    for name in ("resultCheckpoint", "pseudoGradient", "traceRoot"):
        assert field(bounded, 1, name) == field(plain, 1, name), name
    assert field(bounded, 2, "resultCheckpoint") != field(plain, 2, "resultCheckpoint")
    assert field(bounded, 2, "traceRoot") != field(plain, 2, "traceRoot")
    for r in (2, 3):  # the chain of attested states, as in lockstep
        assert field(bounded, r, "baseCheckpoint") == field(bounded, r - 1, "resultCheckpoint")
    assert {rec["groups_formed"] for rec in bounded[3].values()} == {1}


@pytest.mark.parametrize("after_mean", [False, True], ids=["mid-exchange", "before-check"])
def test_a_peer_that_dies_before_the_landing_is_dropped_and_the_others_land_without_it(
    corpus_dir: Path, store_port: int, after_mean: bool
) -> None:
    """Node 2 crashes after 2 steps of round 2, before round 1 lands at step 3: with round 1's
    exchange under way (the survivors' background exchange fails) or done (their hash check at
    the landing fails after the step, which they undo). Either way they re-form without it,
    average round 1 again (the synchronous re-form-and-retry path) at the landing, and finish
    round 2 as a pair, the same weights."""
    plans = [
        Plan(key=k, rounds=2, min_nodes=3, collective_timeout_s=6.0, bounded_overlap=True,
             config=CONFIG, die_in_round=2 if k == 2 else None, die_after_mean=after_mean)
        for k in range(3)
    ]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 17], out
    rounds = _by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    assert set(rounds[1]) == {0, 1}, "round 1 lands without the node that died before landing it"
    assert set(rounds[2]) == {0, 1}
    for rec in rounds[1].values():
        assert rec["attempts"] >= 2, "round 1 was averaged again by a re-formed group"
        assert len(rec["members"]) == 2
    _assert_agree(rounds)


def test_a_joiner_lands_what_is_in_flight_first_and_trains_from_it(
    corpus_dir: Path, store_port: int
) -> None:
    """A member list that changes lands the round in flight before the round starts: the joiner
    fetches that checkpoint and all three train the round from it in lockstep, then overlap
    again."""
    slack = {"join_window_s": 2.0, "bounded_overlap": True, "collective_timeout_s": 30.0,
             "config": CONFIG}  # fmt: skip
    plans = [
        Plan(key=0, rounds=4, min_nodes=2, **slack),  # type: ignore[arg-type]
        Plan(key=1, rounds=4, min_nodes=2, **slack),  # type: ignore[arg-type]
        Plan(key=2, rounds=4, join_after_round=1, **slack),  # type: ignore[arg-type]
    ]
    rounds = _run(plans, store_port, corpus_dir)
    assert sorted(rounds) == [1, 2, 3, 4]
    assert set(rounds[1]) == {0, 1}
    assert 2 in rounds[4], "the joining node trained the last round"
    _assert_agree(rounds)


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
