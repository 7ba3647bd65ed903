"""A broadcasting forge script cannot hang the deploy: a nonce gap in the pool or a chain that
stops mining fails it in seconds, naming what was seen, and forge's whole process group is gone.

Each test runs its own anvil: the pool state they build (a queued transaction, automine off)
must not reach the session's chain.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account

from protocol.broadcast import Limits, run_watched
from protocol.deploy import deploy
from protocol.devnet import AnvilProcess
from protocol.errors import DeploymentError
from tests.integration.pids import alive, wait_gone


@pytest.fixture
def own_anvil(tmp_path: Path) -> Iterator[AnvilProcess]:
    node = AnvilProcess.start(tmp_path / "anvil", accounts=2)
    try:
        yield node
    finally:
        node.stop()


def _a_script_with_a_child(tmp_path: Path) -> tuple[list[str], Path]:
    """A stand-in for forge that never ends and leaves a child of its own in its group."""
    pid_file = tmp_path / "child.pid"
    return ["bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], pid_file


def test_a_nonce_gap_in_the_pool_stops_the_script_in_seconds(
    own_anvil: AnvilProcess, tmp_path: Path
) -> None:
    sender = Account.from_key(own_anvil.accounts[0][1])
    # nonce 1 while the chain waits for nonce 0: the pool queues it behind the gap, as when a
    # transaction forge sent was lost before it reached the pool
    tx = {"to": own_anvil.accounts[1][0], "value": 1, "gas": 21000, "maxFeePerGas": 10**10,
          "maxPriorityFeePerGas": 1, "nonce": 1, "chainId": own_anvil.chain_id}  # fmt: skip
    own_anvil.call(
        "eth_sendRawTransaction", ["0x" + sender.sign_transaction(tx).raw_transaction.hex()]
    )
    cmd, pid_file = _a_script_with_a_child(tmp_path)
    started = time.monotonic()
    with pytest.raises(
        DeploymentError, match=r"1 transaction\(s\) queued behind a missing nonce"
    ) as err:
        run_watched(cmd, cwd=tmp_path, env={}, rpc_url=own_anvil.rpc_url, sender=sender.address,
                    label="the script", limits=Limits(stall_s=1.0))  # fmt: skip
    assert time.monotonic() - started < 15
    assert "deployer nonce 0, pool 0 pending / 1 queued" in str(err.value)
    assert wait_gone(int(pid_file.read_text()), timeout=5), "the script's child outlived it"


def test_a_chain_that_stops_mining_stops_the_deploy_and_kills_forge(
    own_anvil: AnvilProcess, tmp_path: Path
) -> None:
    own_anvil.call("evm_setAutomine", [False])  # forge's first transaction is never mined
    deployer_key = own_anvil.accounts[0][1]
    started = time.monotonic()
    with pytest.raises(DeploymentError, match=r"no transaction of 0x[0-9a-fA-F]{40} mined for 3 s"):
        deploy(own_anvil.rpc_url, deployer_key, committer=own_anvil.accounts[1][0],
               out_path=tmp_path / "d.json", limits=Limits(idle_s=3.0))  # fmt: skip
    assert time.monotonic() - started < 60
    assert not (tmp_path / "d.json").exists()
    left = [p for p in _forge_pids(own_anvil.rpc_url) if alive(p)]
    assert not left, "forge outlived the stopped deploy"


def test_a_script_that_makes_no_progress_is_stopped_with_its_children(
    own_anvil: AnvilProcess, tmp_path: Path
) -> None:
    cmd, pid_file = _a_script_with_a_child(tmp_path)
    sender = own_anvil.accounts[0][0]
    with pytest.raises(DeploymentError, match="the script: deploy did not finish in 2 s"):
        run_watched(cmd, cwd=tmp_path, env={}, rpc_url=own_anvil.rpc_url, sender=sender,
                    label="the script", limits=Limits(total_s=2.0))  # fmt: skip
    assert wait_gone(int(pid_file.read_text()), timeout=5), "the script's child outlived it"


def _forge_pids(rpc_url: str) -> list[int]:
    """forge processes that deploy this project's script to `rpc_url`."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"Deploy.s.sol" in cmdline and rpc_url.encode() in cmdline:
                out.append(int(proc.name))
    return out
