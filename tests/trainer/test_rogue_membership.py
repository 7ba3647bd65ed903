"""Rogue writers against membership: phantom members, a dropped member, a replayed join, a moved
round counter. Real node processes (gloo), a real anvil registry, a real rogue process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.nodes import collect, start_nodes
from tests.trainer.rogue import (
    OnChain,
    assert_agree,
    by_round,
    checks,
    on_chain,
    start_rogue,
    stop_rogue,
)

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]


@pytest.fixture
def run(chain: Any, deployment: Any, tmp_path: Path, corpus_dir: Path) -> OnChain:
    return on_chain(chain, deployment, tmp_path, data=corpus_dir)


def _attack(attack: str, run: OnChain, info: Any, plans: list[Any], port: int, data: Path) -> Any:
    rogue = start_rogue(attack, port, info)
    try:
        return collect(*start_nodes(plans, port, data))
    finally:
        stop_rogue(rogue)


def _governed(run: OnChain, rounds: dict[int, dict[int, dict[str, Any]]]) -> None:
    for recs in rounds.values():
        for rec in recs.values():
            assert rec["config_version"] == run.version
            assert rec["inner_steps"] == run.inner_steps


def test_rogue_phantom_members_are_refused(run: OnChain, corpus_dir: Path, store_port: int) -> None:
    honest = sorted(run.addresses[:2])
    plans = [run.plan(i, rounds=2, min_nodes=2) for i in range(2)]
    info = run.info(honest=honest, absent=run.addresses[3], rounds=2)
    out = _attack("phantom", run, info, plans, store_port, corpus_dir)
    assert out["exit_codes"] == [0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    for recs in rounds.values():
        for rec in recs.values():
            assert sorted(rec["members"]) == honest and rec["attempts"] == 1
    _governed(run, rounds)
    assert_agree(rounds)
    for k in (0, 1):  # each phantom stopped by its own check
        stopped = checks(out["refusals"][k], "members/1/0/slot/")
        assert {"unsigned", "foreign", "bad_signature"} <= stopped, stopped


def test_rogue_cannot_drop_an_honest_member(
    run: OnChain, corpus_dir: Path, store_port: int
) -> None:
    target = run.addresses[2]
    plans = [run.plan(i, rounds=2, min_nodes=3) for i in range(3)]
    info = run.info(honest=run.addresses[:3], target=target, rounds=2)
    out = _attack("drop", run, info, plans, store_port, corpus_dir)
    assert out["exit_codes"] == [0, 0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    for recs in rounds.values():
        assert set(recs) == {0, 1, 2}
        for rec in recs.values():
            assert target in rec["members"] and rec["attempts"] == 1
    _governed(run, rounds)
    assert_agree(rounds)
    refused = [c for k in (0, 1) for c in out["refusals"][k]]
    assert checks(refused, "leave/") & {"bad_signature", "wrong_signer"}, refused
    assert "foreign" in checks(refused, "members/1/0/open"), "the rogue's round-open was refused"


def test_rogue_replayed_join_of_a_departed_node_does_not_count(
    run: OnChain, corpus_dir: Path, store_port: int
) -> None:
    gone = run.addresses[2]
    plans = [run.plan(0, rounds=3, min_nodes=3), run.plan(1, rounds=3, min_nodes=3),
             run.plan(2, leave_after=1, min_nodes=3)]  # fmt: skip
    info = run.info(honest=run.addresses[:3], target=gone, rounds=3)
    out = _attack("replay", run, info, plans, store_port, corpus_dir)
    assert out["exit_codes"] == [0, 0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2, 3]
    assert gone in rounds[1][0]["members"]
    for r in (2, 3):
        assert set(rounds[r]) == {0, 1}
        for rec in rounds[r].values():
            assert gone not in rec["members"] and rec["attempts"] == 1
    _governed(run, rounds)
    assert_agree(rounds)
    assert "stale" in checks(out["refusals"][0], "members/2/0/slot/"), out["refusals"][0]


def test_rogue_cannot_move_current_round(run: OnChain, corpus_dir: Path, store_port: int) -> None:
    plans = [run.plan(0, rounds=3, min_nodes=2), run.plan(1, rounds=3, min_nodes=2),
             run.plan(2, rounds=3, join_after_round=1)]  # fmt: skip
    info = run.info(honest=run.addresses[:3], rounds=3)
    out = _attack("move_round", run, info, plans, store_port, corpus_dir)
    assert out["exit_codes"] == [0, 0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2, 3]
    joined = [rec["round"] for rec in out["results"][2]]
    assert joined and min(joined) >= 2 and max(joined) == 3, "the late node joined the real run"
    _governed(run, rounds)
    assert_agree(rounds)  # and it started from exactly the others' weights
    refused = out["refusals"][2]
    assert checks(refused, "current_round") & {"unsigned", "foreign"}, refused
