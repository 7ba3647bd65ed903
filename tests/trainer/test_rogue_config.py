"""The round's config comes from the chain, read by every node itself at the round's block.

A rogue rewrites the config (the old shared key, forged read-outs, a round-open pinning an old
block): the nodes train with what TrainingConfig says. A node whose chain lags a governance
change (its RPC is a real anvil fork stuck before the change) waits, then sits the round out:
it never trains with another node's copy.
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from protocol.devnet import AnvilProcess, foundry_bin, free_port, rpc_call
from tests.ledger.helpers import governance_sets
from tests.trainer.nodes import RUN_ID, collect, start_nodes
from tests.trainer.rogue import (
    OnChain,
    assert_agree,
    by_round,
    checks,
    on_chain,
    start_rogue,
    stop_rogue,
)
from trainer.network.coordination.store import run_namespace

pytestmark = [pytest.mark.distributed, pytest.mark.anvil]


@pytest.fixture
def run(chain: Any, deployment: Any, tmp_path: Path, corpus_dir: Path) -> OnChain:
    return on_chain(chain, deployment, tmp_path, data=corpus_dir)


def test_rogue_config_rewrite_is_ignored(run: OnChain, corpus_dir: Path, store_port: int) -> None:
    plans = [run.plan(i, rounds=2, min_nodes=2) for i in range(2)]
    rogue = start_rogue("config", store_port, run.info(honest=run.addresses[:2], rounds=2))
    try:
        out = collect(*start_nodes(plans, store_port, corpus_dir))
    finally:
        stop_rogue(rogue)
    assert out["exit_codes"] == [0, 0]
    rounds = by_round(out["results"])
    assert sorted(rounds) == [1, 2]
    for recs in rounds.values():
        for rec in recs.values():  # what TrainingConfig says, not the rogue's version 99 / H=1
            assert rec["config_version"] == run.version
            assert rec["inner_steps"] == run.inner_steps
            assert rec["attestation"]["configVersion"] == run.version
    assert_agree(rounds)
    refused = [c for k in (0, 1) for c in out["refusals"][k]]
    stopped = checks(refused, "members/1/0/open") | checks(refused, "members/2/0/open")
    assert {"foreign", "bad_signature"} <= stopped, refused  # the pinned old config block


def _fork(chain: AnvilProcess, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real anvil forked from ``chain`` at its current block: a node RPC that stopped syncing."""
    port = free_port()
    log = (workdir / "fork.log").open("wb")
    proc = subprocess.Popen(
        [str(foundry_bin("anvil")), "--host", "127.0.0.1", "--port", str(port), "--fork-url",
         chain.rpc_url, "--fork-block-number", str(chain.block_number()), "--chain-id",
         str(chain.chain_id)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            rpc_call(url, "eth_chainId", timeout=1.0)
            return proc, url
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def test_a_node_whose_chain_lags_a_config_change_waits_instead_of_adopting_a_copy(
    run: OnChain, chain: AnvilProcess, deployment: Any, corpus_dir: Path, store_port: int,
    tmp_path: Path,
) -> None:  # fmt: skip
    fork, fork_url = _fork(chain, tmp_path)
    plans = [run.plan(0, rounds=3, min_nodes=3), run.plan(1, rounds=3, min_nodes=3),
             run.plan(2, rounds=3, min_nodes=3, config_wait_s=3.0)]  # fmt: skip
    plans[2].rpc_url = fork_url  # node 2 reads the chain through the stale fork
    try:
        procs, results, manager = start_nodes(plans, store_port, corpus_dir)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", store_port, is_master=False, wait_for_workers=False,
            timeout=timedelta(seconds=120),
        )  # fmt: skip
        store.wait([run_namespace(RUN_ID) + "members/1/0/open"])
        governance_sets(chain, deployment, "setInnerLoop", 5, 2000)  # a vote executed mid-run
        out = collect(procs, results, manager)
    finally:
        fork.kill()
        fork.wait()
    assert out["exit_codes"] == [0, 0, 0]
    rounds = by_round(out["results"])
    assert set(rounds[1]) == {0, 1, 2}
    assert rounds[1][2]["config_version"] == run.version
    new = [r for r, recs in rounds.items() if recs[0]["config_version"] == run.version + 1]
    assert 3 in new, "the honest nodes follow the vote by round 3 at the latest"
    for r in new:
        assert set(rounds[r]) == {0, 1}, "the lagging node never trains with the new config"
        for rec in rounds[r].values():
            assert rec["inner_steps"] == 5 and rec["config_version"] == run.version + 1
    lagging = {rec["config_version"] for rec in out["results"][2]}
    assert lagging == {run.version}, "nor with a copy of it"
    assert "chain_behind" in checks(out["refusals"][2], "config/"), out["refusals"][2]
    assert_agree(rounds)
