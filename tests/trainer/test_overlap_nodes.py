"""NodeRunner's overlapped schedules over real gloo processes, each where they share a behaviour:
the one-round delayed outer step (``overlap``, trainer.round.overlap) and the bounded overlap
(``bounded``, the default, trainer.round.bounded: round r lands at round r+1's first boundary,
here after 3 of 6 steps). tests/trainer/test_bounded_nodes.py has the bounded one's own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.nodes import Plan, collect, start_nodes
from tests.trainer.test_nodes_distributed import _assert_agree, _by_round

pytestmark = [pytest.mark.distributed]
SCHEDULES: dict[str, dict[str, Any]] = {  # Plan fields of each overlapped schedule
    "overlap": {"overlap": True, "config": {"wire_format": "int8"}},
    "bounded": {"bounded_overlap": True,
                "config": {"inner_steps": 6, "trace_interval": 3, "wire_format": "int8"}},
}  # fmt: skip


def _run(plans: list[Plan], port: int, corpus_dir: Path) -> dict[int, dict[int, dict[str, Any]]]:
    out = collect(*start_nodes(plans, port, corpus_dir))
    assert out["exit_codes"] == [0] * len(plans), out["errors"]
    return _by_round(out["results"])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_delayed_step_lands_round_r_during_round_r_plus_1_with_the_plain_bits(
    corpus_dir: Path, store_port: int, second_store: int, schedule: str
) -> None:
    """Round 1's average lands late (a round, or a segment, into round 2) but on the same base:
    the lockstep run's bits. Later rounds start elsewhere (the newest base minus the node's own
    progress in flight; the node's own end of round r-1, moved to the base at its first
    boundary), so they differ from lockstep, yet every member holds the same weights and each
    round's attested base is the previous round's attested result (what the ledger checks)."""
    config = SCHEDULES[schedule]["config"]
    common = {"rounds": 3, "min_nodes": 2}
    plain = _run([Plan(key=k, config=config, bounded_overlap=False, **common)  # type: ignore[arg-type]
                  for k in range(2)], store_port, corpus_dir)  # fmt: skip
    delayed = _run(
        [Plan(key=k, **common, **SCHEDULES[schedule]) for k in range(2)],  # type: ignore[arg-type]
        second_store,
        corpus_dir,
    )
    assert sorted(delayed) == [1, 2, 3]  # the last round landed before the nodes left
    assert all(len(recs) == 2 for recs in delayed.values())
    _assert_agree(delayed)
    _assert_agree(plain)

    def result(rounds: dict[int, dict[int, dict[str, Any]]], r: int) -> str:
        return str(rounds[r][0]["result_checkpoint"])

    assert result(delayed, 1) == result(plain, 1)
    assert result(delayed, 2) != result(plain, 2)
    assert result(delayed, 3) != result(plain, 3)
    # the same pseudo-gradient commitments in round 1, other ones from round 2 on
    assert delayed[1][0]["pseudo_gradient"] == plain[1][0]["pseudo_gradient"]
    assert delayed[2][0]["pseudo_gradient"] != plain[2][0]["pseudo_gradient"]
    assert {rec["groups_formed"] for rec in delayed[3].values()} == {1}
    trace = {r: delayed[r][0]["attestation"]["traceRoot"] for r in (1, 2)}
    assert trace[1] == plain[1][0]["attestation"]["traceRoot"] != plain[2][0]["attestation"][
        "traceRoot"] != trace[2]  # fmt: skip


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_joiner_gets_the_landed_checkpoint_when_membership_changes(
    corpus_dir: Path, store_port: int, schedule: str
) -> None:
    """A member list that changes lands the round in flight first: its checkpoint is what the
    joiner fetches, and all three train on from the same weights."""
    # the members wait in the group's formation for the joiner, which fetches and trains first:
    # 8 s (the default) was too short on a loaded machine (load 14: formation timed out, the
    # joiner was left out of the last round)
    slack = {"join_window_s": 2.0, "collective_timeout_s": 30.0, **SCHEDULES[schedule]}
    plans = [
        Plan(key=0, rounds=4, min_nodes=2, **slack),  # type: ignore[arg-type]
        Plan(key=1, rounds=4, min_nodes=2, **slack),  # type: ignore[arg-type]
        Plan(key=2, rounds=4, join_after_round=1, **slack),  # type: ignore[arg-type]
    ]
    rounds = _run(plans, store_port, corpus_dir)
    assert sorted(rounds) == [1, 2, 3, 4]
    assert set(rounds[1]) == {0, 1}
    assert 2 in rounds[4], "the joining node trained the last round"
    _assert_agree(rounds)  # the joiner started from exactly the members' weights


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("after_mean", [False, True], ids=["mid-all-reduce", "before-check"])
def test_a_peer_that_dies_with_a_round_in_flight_is_dropped_and_the_others_land_it(
    corpus_dir: Path, store_port: int, after_mean: bool, schedule: str
) -> None:
    """Node 2 crashes in round 2's compute while round 1 is in flight: mid-all-reduce (the
    survivors' background all-reduce fails) or once the mean is in (their hash check fails after
    the step, which they undo). Either way they re-form without it and average round 1 again
    (the synchronous re-form-and-retry path), then finish round 2 as a pair, same weights."""
    plans = [
        Plan(
            key=k,
            rounds=2,
            min_nodes=3,
            collective_timeout_s=6.0,
            **SCHEDULES[schedule],
            die_in_round=2 if k == 2 else None,
            die_after_mean=after_mean,
        )
        for k in range(3)
    ]
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


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_peer_that_stalls_with_a_round_in_flight_is_found_by_its_heartbeat(
    corpus_dir: Path, store_port: int
) -> None:
    """Node 2 stops (SIGSTOP) in round 2's compute while round 1 is in flight: the survivors'
    background all-reduce and landing hash check are heartbeat-watched, so they drop it after
    the heartbeat timeout, not the collective timeout, re-form and land round 1 as a pair (and
    round 2 after it)."""
    collective_s = 40.0
    plans = [Plan(key=k, rounds=3, min_nodes=3, overlap=True, collective_timeout_s=collective_s,
                  heartbeat_timeout_s=2.0, stall_in_round=2 if k == 2 else None)
             for k in range(3)]  # fmt: skip
    procs, results, manager = start_nodes(plans, store_port, corpus_dir)
    deadline = time.monotonic() + 240
    while _proc_state(procs[2].pid) != "T":
        assert time.monotonic() < deadline and procs[2].is_alive(), "node 2 never stalled"
        time.sleep(0.05)
    stopped = time.monotonic()
    while not all(any(r["round"] == 1 for r in results.get(k, [])) for k in (0, 1)):
        assert time.monotonic() < deadline, "the survivors never landed round 1"
        time.sleep(0.05)
    took = time.monotonic() - stopped  # round 1 lands at the end of round 2's compute
    os.kill(procs[2].pid, signal.SIGCONT)
    out = collect(procs, results, manager)
    assert out["exit_codes"][:2] == [0, 0], out["errors"]
    print(f"round 1 landed {took:.1f}s after the stall (collective timeout {collective_s:g}s)")
    for k in (0, 1):  # dropped by the watch of the background all-reduce (StalledError), and
        # under load possibly again by the re-form-and-retry path's first attempt with the same
        # members (when node 2's stale heartbeat still lists it): round 1's, by the watch
        stalls = [r for r, _ in out["stalled"][k]]
        assert stalls and set(stalls[:2]) == {1}, out["stalled"]
    found = {tuple(who) for k in (0, 1) for _, who in out["stalled"][k]}
    assert len(found) == 1 and len(next(iter(found))) == 1, out["stalled"]  # node 2, by both
    rounds = _by_round(out["results"])
    assert {0, 1} <= set(rounds[2]) and 2 not in rounds[2], "the stalled node was dropped"
    _assert_agree(rounds)
