"""`coloco rewards claim` and the dispute window, against the real contracts on anvil.

The ledger's answer (`GET /v1/rewards/{account}`) is served by a small real HTTP server with the
proof of a tree this test commits on chain, so the claim path runs end to end: a pending root is
explained (or waited for, with no block mined meanwhile), a revoked root is refused.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from typer.testing import CliRunner

from coloco_cli.main import app
from coloco_cli.rewards.ops import claim_rewards
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.errors import ConfigError
from protocol.merkle import RewardsTree
from protocol.types import Address, Bytes32, RoundNumber, RunId

pytestmark = [pytest.mark.integration, pytest.mark.anvil]

OWED = 3 * 10**18


def _commit(chain: AnvilProcess, deployment: Deployment, account: Address) -> RewardsTree:
    tree = RewardsTree.build([(account, OWED), (Address(Account.create().address), 1)])
    committer = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[1][1]))
    committer.commit_round(
        RunId(os.urandom(32)), RoundNumber(0), rewards_root=tree.root,
        checkpoint_hash=Bytes32(os.urandom(32)), total_work=1,
        attestations_root=Bytes32(bytes(32)), reward_total=OWED + 1,
    )  # fmt: skip
    return tree


def _serve(answer: dict[str, Any], tree: RewardsTree, account: Address) -> None:
    answer.update(
        account=account,
        cumulative_amount=str(OWED),
        root="0x" + tree.root.hex(),
        proof=["0x" + p.hex() for p in tree.proof(account)],
    )


def test_pending_root_is_explained_then_claimed_after_the_window(
    chain: AnvilProcess, deployment: Deployment, ledger_answer: tuple[str, dict[str, Any]]
) -> None:
    url, answer = ledger_answer
    claimer = Account.from_key(chain.accounts[7][1])
    account = Address(claimer.address)
    tree = _commit(chain, deployment, account)
    _serve(answer, tree, account)
    client = ChainClient(chain.rpc_url, deployment, claimer)
    with pytest.raises(ConfigError) as info:
        claim_rewards(client, url, account)
    assert "dispute window" in info.value.message and "claimable from" in info.value.message
    assert "--wait-final" in info.value.message and "`coloco devnet mine 1 --seconds " in str(
        info.value.message
    )
    # no block is mined while waiting: finality is judged by the next block's time
    result = claim_rewards(client, url, account, wait_pending=True)
    assert result.paid == OWED and result.balance >= OWED
    assert client.claimed(account) == OWED


def test_revoked_root_is_refused(
    chain: AnvilProcess, deployment: Deployment, ledger_answer: tuple[str, dict[str, Any]]
) -> None:
    url, answer = ledger_answer
    claimer = Account.from_key(chain.accounts[8][1])
    account = Address(claimer.address)
    tree = _commit(chain, deployment, account)
    _serve(answer, tree, account)
    guardian = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[0][1]))
    assert deployment.guardian == chain.accounts[0][0]
    guardian.transact("ContributionLedger", "revokeRoot", tree.root)
    client = ChainClient(chain.rpc_url, deployment, claimer)
    with pytest.raises(ConfigError) as info:
        claim_rewards(client, url, account, wait_pending=True)
    assert "revoked" in info.value.message
    assert client.claimed(account) == 0


def test_waits_right_when_the_chain_clock_runs_ahead_of_the_wall_clock(
    chain: AnvilProcess, deployment: Deployment, ledger_answer: tuple[str, dict[str, Any]]
) -> None:
    """After evm_increaseTime (a devnet's governance skip) blocks are stamped ahead of the wall
    clock; the wait must follow the chain, not the wall clock, or it never ends."""
    url, answer = ledger_answer
    chain.increase_time(120)
    claimer = Account.from_key(chain.accounts[9][1])
    account = Address(claimer.address)
    tree = _commit(chain, deployment, account)
    _serve(answer, tree, account)
    client = ChainClient(chain.rpc_url, deployment, claimer)
    result = claim_rewards(client, url, account, wait_pending=True, wait_s=0.1)
    assert result.paid == OWED


def test_show_says_when_a_pending_reward_becomes_claimable(
    cli_env: Path,
    chain: AnvilProcess,
    deployment: Deployment,
    ledger_answer: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`coloco rewards show` follows the ledger's root state: nothing claimable while the root is
    in its dispute window, and the time it becomes claimable (the chain's finalizedAt)."""
    url, answer = ledger_answer
    monkeypatch.setenv("COLOCO_LEDGER_URL", url)
    account = Address(Account.create().address)
    chain.increase_time(3600)  # blocks ahead of the wall clock: the root stays pending meanwhile
    tree = _commit(chain, deployment, account)
    _serve(answer, tree, account)
    finalized_at = ChainClient(chain.rpc_url, deployment).root_status(tree.root).finalized_at
    # a receipt's reason is longer than a terminal line, and brackets are not markup
    reason = ("[audited] usefulness 1.000: own-shard loss 3.4834 -> 3.2024, random 3.4183 -> "
              "3.2748; first batch: 42 of 42 most-moved (>= 0.75 lr x H) agree")  # fmt: skip
    receipt = {"run_id": "0x" + "01" * 32, "round": 4, "node": account, "claimed_tokens": 10,
               "verified_tokens": 10, "quality": 0.942661234567, "reward": str(OWED),
               "verified": True, "reason": reason, "round_state": "committed",
               "root_state": "pending", "claimable_at": finalized_at}  # fmt: skip
    answer.update(root_state="pending", claimable_at=finalized_at, receipts=[receipt])
    shown = CliRunner().invoke(app, ["rewards", "show", account])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    when = datetime.fromtimestamp(finalized_at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert "claimable now │ 0 CMS" in text, text
    assert f"in dispute window │ 3 CMS, claimable from {when}" in text, text
    # receipts of all runs together, each with its run
    assert f"run 0x010101…, round 4: root pending, claimable from {when}" in text, text
    assert re.search(r"│ 0x010101… │ 4 │ 0x\w{6}… │ 10 │ 10 │ 0.9427 │ 3 CMS │", text), text
    assert f"run 0x010101…, round 4, {account[:8]}…: {reason}" in text, text
    as_json = json.loads(CliRunner().invoke(app, ["rewards", "show", account, "--json"]).output)
    assert as_json["claimable"] == 0 and as_json["claimable_at"] == finalized_at

    answer.update(root_state="finalized")  # the window passed: everything unclaimed pays
    receipt.update(root_state="finalized")
    text = " ".join(CliRunner().invoke(app, ["rewards", "show", account]).output.split())
    assert "claimable now │ 3 CMS" in text and "dispute window" not in text, text
