"""The rendezvous host (here a rogue that hosts the store, then vanishes mid-run) is no single
point of failure: the members fail over to the successor their last signed round-open names
(the lowest member address that advertised an endpoint) and finish the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocol.devnet import free_port
from tests.trainer.nodes import collect, start_nodes
from tests.trainer.rogue import OnChain, assert_agree, by_round, on_chain, start_rogue, stop_rogue

# slow: in one of four full quick-mode runs here the failover raced (a member still waiting on the
# dead host's round-3 slot for 60 s while the other finished round 3 alone, so the late member
# found no majority-signed round-3 hash and stopped). The race is recorded in docs/trainer.md's
# limits; until it is fixed the test runs in `make test-full`, not in CI's quick mode.
pytestmark = [pytest.mark.distributed, pytest.mark.anvil, pytest.mark.slow]


def test_rogue_host_dies_mid_run_and_the_members_fail_over(
    chain: Any, deployment: Any, tmp_path: Path, corpus_dir: Path
) -> None:
    run: OnChain = on_chain(chain, deployment, tmp_path)
    port = free_port()
    host = start_rogue("host", port, run.info())
    endpoints = {i: f"127.0.0.1:{free_port()}" for i in range(2)}
    plans = [run.plan(i, rounds=4, min_nodes=2, own_endpoint=endpoints[i], failover_wait_s=30.0)
             for i in range(2)]  # fmt: skip
    try:
        out = collect(*start_nodes(plans, port, corpus_dir))
        assert host.exitcode == 9, "the host vanished mid-run"
    finally:
        stop_rogue(host)
    assert out["exit_codes"] == [0, 0]
    rounds = by_round(out["results"])
    assert {1, 3, 4} <= set(rounds), "at most the round in flight is lost"
    for r in (1, 3, 4):
        assert set(rounds[r]) == {0, 1}
    assert_agree(rounds)
    successor = endpoints[min(range(2), key=lambda i: run.addresses[i])]
    for k in (0, 1):
        assert out["failovers"][k] == [f"127.0.0.1:{port} -> {successor}"], out["failovers"]
