"""The rendezvous host (here a rogue that hosts the store, then vanishes mid-run) is no single
point of failure: the members fail over to the successor their last signed round-open names
(the lowest member address that advertised an endpoint) and finish the run.

Two moments: while round 2 is in flight (config read-outs, training), and while the members wait
on round 3's member slots (one join posted, the other not yet). In both, every member notices at
once (its next store call or its heartbeat probe fails), they meet at the same successor, and no
member finishes a round the other cannot follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocol.devnet import free_port
from tests.trainer.nodes import collect, start_nodes
from tests.trainer.rogue import OnChain, assert_agree, by_round, on_chain, start_rogue, stop_rogue

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]


@pytest.mark.parametrize(
    ("die_after", "delay_s", "kept"),
    [
        ("members/2/0/open", 0.5, {1, 3, 4}),  # round 2 in flight
        ("members/3/0/slot/0", 0.0, {1, 2, 4}),  # members waiting on round 3's slots
    ],
    ids=["round-in-flight", "slot-wait"],
)
def test_rogue_host_dies_mid_run_and_the_members_fail_over(
    chain: Any,
    deployment: Any,
    tmp_path: Path,
    corpus_dir: Path,
    die_after: str,
    delay_s: float,
    kept: set[int],
) -> None:
    run: OnChain = on_chain(chain, deployment, tmp_path, data=corpus_dir)
    port = free_port()
    host = start_rogue("host", port, run.info(die_after=die_after, die_delay_s=delay_s))
    endpoints = {i: f"127.0.0.1:{free_port()}" for i in range(2)}
    plans = [run.plan(i, rounds=4, min_nodes=2, own_endpoint=endpoints[i], failover_wait_s=30.0)
             for i in range(2)]  # fmt: skip
    try:
        out = collect(*start_nodes(plans, port, corpus_dir))
        assert host.exitcode == 9, "the host vanished mid-run"
    finally:
        stop_rogue(host)
    assert out["exit_codes"] == [0, 0], out
    rounds = by_round(out["results"])
    assert kept <= set(rounds), f"at most the round in flight is lost: {sorted(rounds)}"
    for r in kept:
        assert set(rounds[r]) == {0, 1}, f"round {r} was finished by {sorted(rounds[r])} only"
    assert_agree(rounds)  # a round one member finished alone is one the other followed
    successor = endpoints[min(range(2), key=lambda i: run.addresses[i])]
    for k in (0, 1):
        assert out["failovers"][k] == [f"127.0.0.1:{port} -> {successor}"], out["failovers"]
