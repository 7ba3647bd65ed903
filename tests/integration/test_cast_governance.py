"""Standard tooling drives coloco's Governor: propose, vote, queue, execute with `cast send`.

Nothing here uses coloco's Python chain code to write: every transaction is Foundry's `cast`
against the OpenZeppelin ABI signatures, proving the Governor and token keep the standard ABI.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.toolchain import foundry_bin
from reference.settings import TrainingSettings
from tests.integration.conftest import Holder

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

PROPOSE = "propose(address[],uint256[],bytes[],string)"
HASH = "hashProposal(address[],uint256[],bytes[],bytes32)"
QUEUE = "queue(address[],uint256[],bytes[],bytes32)"
EXECUTE = "execute(address[],uint256[],bytes[],bytes32)"


def cast(*args: str) -> str:
    proc = subprocess.run(
        [str(foundry_bin("cast")), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"cast {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout.strip()


def test_cast_proposes_votes_queues_and_executes(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    rpc = ["--rpc-url", chain.rpc_url]
    gov = deployment.address("ModelGovernor")
    token = deployment.address("ModelShareToken")
    config = deployment.address("TrainingConfig")
    alice, bob = holders

    # the token speaks plain ERC20Votes
    assert (
        int(cast("call", token, "getVotes(address)(uint256)", alice.address, *rpc).split()[0])
        == alice.amount
    )
    assert cast("call", token, "symbol()(string)", *rpc) == '"CMS"'

    calldata = cast("calldata", "setMaxNodes(uint32)", "12")
    description = "cast: at most 12 nodes per round"
    targets, values, datas = f"[{config}]", "[0]", f"[{calldata}]"
    desc_hash = cast("keccak", description)
    cast(
        "send", gov, PROPOSE, targets, values, datas, description, "--private-key", alice.key, *rpc
    )
    pid = cast("call", gov, f"{HASH}(uint256)", targets, values, datas, desc_hash, *rpc).split()[0]

    chain.increase_time(2)
    cast("send", gov, "castVote(uint256,uint8)", pid, "1", "--private-key", alice.key, *rpc)
    cast(
        "send",
        gov,
        "castVoteWithReason(uint256,uint8,string)",
        pid,
        "1",
        "yes",
        "--private-key",
        bob.key,
        *rpc,
    )
    votes = cast("call", gov, "proposalVotes(uint256)(uint256,uint256,uint256)", pid, *rpc).split(
        "\n"
    )
    assert int(votes[1].split()[0]) == alice.amount + bob.amount

    chain.increase_time(21)
    assert cast("call", gov, "state(uint256)(uint8)", pid, *rpc) == "4"  # Succeeded
    cast("send", gov, QUEUE, targets, values, datas, desc_hash, "--private-key", bob.key, *rpc)
    chain.increase_time(2)
    cast("send", gov, EXECUTE, targets, values, datas, desc_hash, "--private-key", bob.key, *rpc)
    assert cast("call", gov, "state(uint256)(uint8)", pid, *rpc) == "7"  # Executed

    assert TrainingSettings.read(ChainClient(chain.rpc_url, deployment)).max_nodes == 12
    # and coloco's own CLI reads what cast did
    listing = CliRunner().invoke(app, ["gov", "list"])
    assert listing.exit_code == 0, listing.exception
    assert "Executed" in listing.output and "cast: at most 12" in " ".join(listing.output.split())
