"""A node whose weights diverge is evicted by the majority instead of stopping the run."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from protocol.errors import CheckpointError
from tests.harness.distributed import run_workers
from tests.trainer.nodes import Plan, collect, start_nodes
from trainer.network.comm import GroupAverager
from trainer.network.group import DivergedError, RoundGroup
from trainer.network.members import Members

pytestmark = [pytest.mark.distributed]

ADDRS = ("0x" + "01" * 20, "0x" + "02" * 20, "0x" + "03" * 20)


def _check(rank: int, world: int, digests: list[bytes]) -> tuple[str, object, bool]:
    group = RoundGroup(Members(4, 0, ADDRS), rank, GroupAverager(None, timedelta(seconds=30)))
    try:
        out = group.check_same(digests[rank], timedelta(seconds=30))
    except DivergedError as exc:
        return "diverged", str(exc), False
    except CheckpointError as exc:
        return "no majority", str(exc), False
    return "ok", out, group.publisher


def test_the_majority_evicts_the_divergent_node_and_the_first_honest_member_publishes() -> None:
    a, b, c = b"\xaa" * 32, b"\xbb" * 32, b"\xcc" * 32
    # rank 2 diverges; then rank 0 diverges (rank 1 must publish); then no majority at all
    cases = [[a, a, b], [b, a, a], [a, b, c]]
    results = run_workers(_run_cases, 3, cases, timeout=180)
    r2, r0, none = ([res[i] for res in results] for i in range(3))
    assert r2[0] == ("ok", (ADDRS[2],), True) and r2[1] == ("ok", (ADDRS[2],), False)
    assert r2[2][0] == "diverged"
    assert r0[0][0] == "diverged"
    assert r0[1] == ("ok", (ADDRS[0],), True) and r0[2] == ("ok", (ADDRS[0],), False)
    assert [x[0] for x in none] == ["no majority"] * 3  # nothing to evict: the run stops


def _run_cases(rank: int, world: int, cases: list[list[bytes]]) -> list[tuple[str, object, bool]]:
    return [_check(rank, world, digests) for digests in cases]


@pytest.mark.slow
def test_a_divergent_node_recovers_from_a_peer_and_the_run_goes_on(
    corpus_dir: Path, store_port: int
) -> None:
    plans = [Plan(key=k, rounds=3, min_nodes=3, diverge_in_round=2 if k == 1 else None)
             for k in range(3)]  # fmt: skip
    out = collect(*start_nodes(plans, store_port, corpus_dir))
    assert out["exit_codes"] == [0, 0, 0]
    rounds: dict[int, dict[int, str]] = {}
    for key, records in out["results"].items():
        for rec in records:
            rounds.setdefault(rec["round"], {})[key] = rec["result_checkpoint"]
    assert sorted(rounds[2]) == [0, 2], "the divergent node's round 2 is not reported"
    assert len(set(rounds[2].values())) == 1
    assert sorted(rounds[3]) == [0, 1, 2], "it rejoined round 3 from a peer's checkpoint"
    assert len(set(rounds[3].values())) == 1
