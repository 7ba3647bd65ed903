"""`coloco fund ...` and `coloco code ...` against the real anvil, every command with --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ChainError, ConfigError
from tests.integration.conftest import Holder

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()
RUN = "0x" + "c0de" * 16


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output.strip().splitlines()[-1])


def _as(chain: AnvilProcess, who: str, contract: Any, fn: str, *args: Any) -> None:
    """Sent as `who` (impersonated: the Timelock executing a vote, the distributor paying)."""
    chain.call("anvil_impersonateAccount", [who])
    chain.call("anvil_setBalance", [who, hex(10**19)])
    tx = getattr(contract.functions, fn)(*args).transact({"from": who})
    assert chain.w3.eth.wait_for_transaction_receipt(tx)["status"] == 1
    chain.call("anvil_stopImpersonatingAccount", [who])


def _commit_rounds(committer: ChainClient, rounds: int) -> None:
    """Rounds 1..`rounds` each pay the whole compute pool under a new rewards root (the code
    pool grows with the compute budget committed, never with round numbers)."""
    compute = committer.training_config.pool_rewards()[0]
    for r in range(rounds + 1):
        root, reward = (bytes([0x40 + r]) * 32, compute) if r else (b"\0" * 32, 0)
        args = [bytes.fromhex(RUN[2:]), r, root, bytes([r + 1]) * 32, 1, b"\0" * 32, reward]
        committer.transact("ContributionLedger", "commitRound", *args)


def test_fund_and_code_commands(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment, holders: list[Holder]
) -> None:
    committer_key = next(k for a, k in chain.accounts if a == deployment.committer)
    backer_addr, backer_key = chain.accounts[6]
    dev_addr, dev_key = chain.accounts[7]
    reviewer = Account.create()
    chain.call("anvil_setBalance", [reviewer.address, hex(10**19)])
    viewer = ChainClient(chain.rpc_url, deployment)
    timelock = deployment.address("TimelockController")
    registry = viewer.contract("CodeRegistry")
    _as(chain, timelock, viewer.contract("TrainingConfig"), "setOwnershipSplit", 8000, 1000, 1000)
    _as(
        chain,
        timelock,
        registry,
        "grantRole",
        registry.functions.COMMITTEE_ROLE().call(),
        reviewer.address,
    )

    opened = _json("fund", "open", RUN, "--end-in", "600", "--private-key", committer_key)
    assert opened["eth_per_round_wei"] == str(10**17)
    dep = _json("fund", "deposit", RUN, "1.5", "--private-key", backer_key)
    assert dep["backer"] == backer_addr and dep["deposit_wei"] == str(15 * 10**17)
    st = _json("fund", "status", RUN, "--backer", backer_addr)
    assert st["total_deposited_wei"] == str(15 * 10**17) and st["held_wei"] == str(15 * 10**17)
    assert st["backer"]["deposited_wei"] == str(15 * 10**17)
    refused = runner.invoke(app, ["fund", "refund", RUN, "--backer", backer_addr,
                                  "--private-key", backer_key])  # fmt: skip
    assert isinstance(refused.exception, ChainError)
    assert "RunNotCancelled" in str(refused.exception) and "this run is live" in str(
        refused.exception
    )

    _commit_rounds(ChainClient(chain.rpc_url, deployment, Account.from_key(committer_key)), 3)
    commit = "9fceb02d0ae598e95dc970b74767f19372d61af8"
    args = (
        "--repo",
        "https://example.org/r.git",
        "--commit",
        commit,
        "--description",
        "https://example.org/pr/1",
    )
    first = _json("code", "submit", RUN, *args, "--private-key", dev_key)["id"]
    second = _json("code", "submit", RUN, *args, "--private-key", dev_key)["id"]
    _json("code", "approve", str(first), "5", "--private-key", reviewer.key.hex())
    big = runner.invoke(
        app, ["code", "approve", str(second), "500", "--private-key", reviewer.key.hex()]
    )
    assert "AmountNeedsVote" in str(big.exception) and "coloco code propose" in str(big.exception)
    _json(
        "code", "reject", str(second), "--reason", "duplicate", "--private-key", reviewer.key.hex()
    )
    listed = {c["id"]: c for c in _json("code", "list", "--run", RUN)}
    assert listed[first]["status"] == "approved" and listed[first]["amount"] == str(5 * 10**18)
    assert listed[second]["status"] == "rejected" and listed[second]["reason"] == "duplicate"
    assert listed[first]["commit"].startswith("0x" + commit)
    claimed = _json("code", "claim", str(first), "--private-key", backer_key)  # anyone may send it
    assert claimed["amount"] == str(5 * 10**18)
    assert _json("code", "show", str(first))["status"] == "claimed"
    assert int(viewer.token_balance(dev_addr)) == 5 * 10**18

    # above the committee's threshold: a governance vote pays it (`coloco code propose`)
    third = _json("code", "submit", RUN, *args, "--private-key", dev_key)["id"]
    pool = int(viewer.code_registry.code_pool(bytes.fromhex(RUN[2:]))) - 5 * 10**18
    alice = holders[0]
    prop = _json("code", "propose", str(third), f"{pool}wei", "--private-key", alice.key)
    assert prop["id"] == third and f"#{third}" in prop["description"]
    pid = prop["proposal_id"]
    chain.increase_time(2)
    _json("gov", "vote", pid, "--support", "for", "--private-key", alice.key)
    chain.increase_time(21)
    _json("gov", "queue", pid, "--private-key", alice.key)
    chain.increase_time(2)
    assert _json("gov", "execute", pid, "--private-key", alice.key)["state"] == "Executed"
    assert _json("code", "show", str(third))["status"] == "approved"
    assert _json("code", "claim", str(third), "--private-key", dev_key)["amount"] == str(pool)
    assert int(viewer.token_balance(dev_addr)) == 5 * 10**18 + pool
    unknown = runner.invoke(app, ["code", "propose", "99", "1", "--private-key", alice.key])
    assert isinstance(unknown.exception, ConfigError) and "no code contribution" in str(
        unknown.exception
    )
