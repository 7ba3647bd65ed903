"""`coloco fund ...` and `coloco code ...` against the real anvil, every command with --json."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
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
from protocol.merkle import RewardsTree
from protocol.types import Address
from tests.integration.conftest import Holder

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

runner = CliRunner()
RUN = "fund-code-run"  # a run name, as every command takes it (its sha256 is the id)
RUN_ID = hashlib.sha256(RUN.encode()).digest()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output.strip().splitlines()[-1])


def _commit_rounds(committer: ChainClient, rounds: int, run_id: bytes = RUN_ID) -> None:
    """Rounds 1..`rounds` each pay the whole compute pool under a new rewards root (the code
    pool grows with the compute budget committed, never with round numbers)."""
    compute = committer.training_config.pool_rewards()[0]
    for r in range(rounds + 1):
        root, reward = (bytes([0x40 + r]) * 32, compute) if r else (b"\0" * 32, 0)
        args = [run_id, r, root, bytes([r + 1]) * 32, 1, b"\0" * 32, reward]
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
    chain.transact_as(
        timelock, viewer.contract("TrainingConfig"), "setOwnershipSplit", 8000, 1000, 1000
    )
    chain.transact_as(
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
    assert st["run_id"] == "0x" + RUN_ID.hex()
    shown = runner.invoke(app, ["fund", "status", RUN, "--backer", backer_addr])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())  # ETH, CMS and UTC for a person; no wei, no unix time
    assert "deposited 1.5 ETH" in text and "held 1.5 ETH" in text, text
    end = datetime.fromtimestamp(st["funding_end"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"funding ends {end}" in text and "capital pool 0 CMS" in text, text
    assert "wei" not in text and str(st["funding_end"]) not in text and "{" not in text, text
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
    assert listed[first]["commit"] == "0x" + commit  # as submitted, not zero-padded to 32 bytes
    listing = runner.invoke(app, ["code", "list", "--run", RUN]).output
    assert f"#{first} approved 5 CMS https://example.org/r.git 0x{commit}" in listing, listing
    claimed = _json("code", "claim", str(first), "--private-key", backer_key)  # anyone may send it
    assert claimed["amount"] == str(5 * 10**18)
    shown_code = _json("code", "show", str(first))
    assert shown_code["status"] == "claimed" and shown_code["commit"] == "0x" + commit
    assert shown_code["repository_uri"] == "https://example.org/r.git"
    assert shown_code["description_uri"] == "https://example.org/pr/1"
    assert shown_code["run_id"] == "0x" + RUN_ID.hex()
    text = " ".join(runner.invoke(app, ["code", "show", str(first)]).output.split())
    assert "amount 5 CMS" in text and f"commit 0x{commit}" in text, text
    assert "repository https://example.org/r.git" in text, text
    assert "description https://example.org/pr/1" in text, text
    rejected = " ".join(runner.invoke(app, ["code", "show", str(second)]).output.split())
    assert "rejected because duplicate" in rejected, rejected
    assert int(viewer.token_balance(dev_addr)) == 5 * 10**18

    # above the committee's threshold: a governance vote pays it (`coloco code propose`)
    third = _json("code", "submit", RUN, *args, "--private-key", dev_key)["id"]
    pool = int(viewer.code_registry.code_pool(RUN_ID)) - 5 * 10**18
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
    # a refusal names its arguments as a person reads them: bytes32 as 0x hex, times in UTC
    chain.increase_time(700)
    late = runner.invoke(app, ["fund", "deposit", RUN, "1", "--private-key", backer_key])
    assert isinstance(late.exception, ChainError), late.output
    end = datetime.fromtimestamp(st["funding_end"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"RunEnded(runId=0x{RUN_ID.hex()}, fundingEnd={end}, now_=" in str(late.exception)
    assert "b'" not in str(late.exception) and "deposits into this run are closed" in str(
        late.exception
    )
    never = runner.invoke(app, ["fund", "status", "never-opened"])
    assert isinstance(never.exception, ConfigError), never.output
    assert "`coloco fund open never-opened`" in never.exception.message
    not_hex = runner.invoke(app, ["code", "submit", RUN, "--repo", "r", "--commit", "main",
                                  "--description", "d", "--private-key", dev_key])  # fmt: skip
    assert isinstance(not_hex.exception, ConfigError), not_hex.output
    assert "'main' is not a git SHA-1" in not_hex.exception.message
    bad = runner.invoke(app, ["fund", "status", "0x12"])  # a 0x id that is not 32 bytes
    assert isinstance(bad.exception, ConfigError) and "run '0x12'" in bad.exception.message
    assert "64 hex digits" in bad.exception.message
    unknown = runner.invoke(app, ["code", "propose", "99", "1", "--private-key", alice.key])
    assert isinstance(unknown.exception, ConfigError) and "no code contribution" in str(
        unknown.exception
    )


def test_fund_claim_explains_a_pending_eth_root_then_waits_with_wait_final(
    cli_env: Path,
    chain: AnvilProcess,
    deployment: Deployment,
    ledger_answer: tuple[str, dict[str, Any]],
) -> None:
    url, answer = ledger_answer
    run = "eth-claim-run"
    run_id = hashlib.sha256(run.encode()).digest()
    committer_key = next(k for a, k in chain.accounts if a == deployment.committer)
    committer = ChainClient(chain.rpc_url, deployment, Account.from_key(committer_key))
    payout_addr, payout_key = chain.accounts[8]
    _json("fund", "open", run, "--end-in", "600", "--private-key", committer_key)
    _json("fund", "deposit", run, "1", "--private-key", chain.accounts[6][1])
    _commit_rounds(committer, 1, run_id)
    tree = RewardsTree.build([(Address(payout_addr), 10**17)])
    committer.transact("RunFunding", "commitEthRoot", run_id, 1, tree.root, 10**17)
    answer.update(cumulative_wei=str(10**17), root="0x" + tree.root.hex(),
                  proof=["0x" + p.hex() for p in tree.proof(Address(payout_addr))])  # fmt: skip
    finalizes_at = committer.contract("RunFunding").functions.rootOf(run_id, tree.root).call()[0]
    base = ["fund", "claim", run, payout_addr, "--ledger-url", url, "--private-key", payout_key]

    pending = runner.invoke(app, base)
    assert isinstance(pending.exception, ConfigError), pending.output
    when = datetime.fromtimestamp(finalizes_at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"claimable from {when}" in pending.exception.message
    assert "--wait-final" in pending.exception.message
    # an idle devnet's clock moves only with a block: the one command that moves it is named
    assert "`coloco devnet mine 1 --seconds " in pending.exception.message
    before = committer.w3.eth.get_balance(payout_addr)

    # no block is mined while waiting: finality is judged by the next block's time
    paid = runner.invoke(app, [*base, "--wait-final"])
    assert paid.exit_code == 0, (paid.output, paid.exception)
    text = " ".join(paid.output.split())
    assert f"paid 0.1 ETH to {payout_addr} for compute" in text and "{" not in text, text
    assert committer.w3.eth.get_balance(payout_addr) > before + 9 * 10**16  # less its gas
    again = _json(*base)  # nothing new: nothing sent
    assert again["eth"]["eth_paid_wei"] == "0" and "tx" not in again["eth"]


def test_zero_pools_and_a_missing_committee_role_say_why_and_what_to_change(
    cli_env: Path, chain: AnvilProcess, deployment: Deployment
) -> None:
    """A deployment that keeps the contract's 10000/0/0 split and appoints no committee: a
    backer's claim, `code approve` and `code propose` are refused before any transaction, each
    naming the reason (capital or code share 0, no COMMITTEE_ROLE, vesting not started) and the
    option or command that changes it (was: NothingVested "try again later" for ever, a raw
    AccessControlUnauthorizedAccount role hash, a vote whose execution reverts
    CodePoolExceeded(pool=0))."""
    run = "zero-pools-run"
    committer_key = next(k for a, k in chain.accounts if a == deployment.committer)
    backer_key = chain.accounts[6][1]
    dev_key, reviewer = chain.accounts[7][1], chain.accounts[8]
    _json("fund", "open", run, "--end-in", "600", "--private-key", committer_key)
    _json("fund", "deposit", run, "1", "--private-key", backer_key)
    vested = ["fund", "claim", run, "--no-eth", "--vested", "--private-key", backer_key]

    early = runner.invoke(app, vested)
    assert isinstance(early.exception, ConfigError), early.output
    assert "vests only after its funding ends" in early.exception.message
    assert "`coloco devnet mine 1 --seconds " in early.exception.message
    chain.increase_time(700)
    zero = runner.invoke(app, vested)
    assert isinstance(zero.exception, ConfigError), zero.output
    msg = zero.exception.message
    assert "capital pool is 0 CMS and stays so" in msg and "capital 0 bps" in msg, msg
    assert "`coloco devnet deploy --ownership-split compute=7000,capital=2000,code=1000`" in msg

    _commit_rounds(ChainClient(chain.rpc_url, deployment, Account.from_key(committer_key)), 2,
                   hashlib.sha256(run.encode()).digest())  # fmt: skip
    cid = _json("code", "submit", run, "--repo", "https://example.org/r.git", "--commit",
                "9fceb02d0ae598e95dc970b74767f19372d61af8", "--description",
                "https://example.org/pr/1", "--private-key", dev_key)["id"]  # fmt: skip
    outsider = runner.invoke(app, ["code", "approve", str(cid), "1", "--private-key", reviewer[1]])
    assert isinstance(outsider.exception, ConfigError), outsider.output
    msg = outsider.exception.message
    assert f"{reviewer[0]} is not on the code committee" in msg and "COMMITTEE_ROLE" in msg, msg
    assert "CodeRegistry.grantRole" in msg and "--code-committee" in msg, msg
    registry = ChainClient(chain.rpc_url, deployment).contract("CodeRegistry")
    role = registry.functions.COMMITTEE_ROLE().call()
    chain.transact_as(
        deployment.address("TimelockController"), registry, "grantRole", role, reviewer[0]
    )
    empty = runner.invoke(app, ["code", "approve", str(cid), "1", "--private-key", reviewer[1]])
    assert isinstance(empty.exception, ConfigError), empty.output
    msg = empty.exception.message
    assert "code pool of run 0x" in msg and "is 0 CMS and never grows" in msg, msg
    assert "code 0 bps" in msg and "--ownership-split" in msg, msg
    voted = runner.invoke(app, ["code", "propose", str(cid), "1", "--private-key", dev_key])
    assert isinstance(voted.exception, ConfigError), voted.output
    assert "nothing was proposed" in voted.exception.message
    assert "never grows" in voted.exception.message
