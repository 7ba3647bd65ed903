"""Gas on a real chain: commitRound costs the same for 1 node or 1,024; claims stay bounded.

forge measures execution gas (contracts/snapshots/); these receipts add the 21,000 base cost and
calldata, which is what an operator pays (numbers in docs/contracts.md).
"""

from __future__ import annotations

import logging

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract import Contract

from protocol.deployment import Deployment, abi
from protocol.devnet import AnvilProcess
from protocol.merkle import RewardsTree
from protocol.types import Address

log = logging.getLogger(__name__)

CLAIM_GAS = 300_000  # explicit: eth_estimateGas can miss a new Votes checkpoint (see docs)


def _send(w3: Web3, sender: LocalAccount, fn: object, gas: int | None = None) -> int:
    params: dict[str, object] = {
        "from": sender.address,
        "nonce": w3.eth.get_transaction_count(sender.address),
    }
    if gas is not None:
        params["gas"] = gas
    tx = fn.build_transaction(params)  # type: ignore[attr-defined]
    raw = sender.sign_transaction(tx).raw_transaction
    receipt = w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(raw))
    assert receipt["status"] == 1
    return int(receipt["gasUsed"])


def _tree(accounts: list[Address], scale: int) -> RewardsTree:
    return RewardsTree.build([(a, (i + 1) * scale) for i, a in enumerate(accounts)])


def test_commit_round_gas_does_not_depend_on_node_count(
    deployment: Deployment, chain: AnvilProcess
) -> None:
    w3 = chain.w3
    ledger: Contract = w3.eth.contract(
        address=deployment.address("ContributionLedger"), abi=abi("ContributionLedger")
    )
    key = next(k for a, k in chain.accounts if a == deployment.committer)
    committer = Account.from_key(key)
    run = b"\x42" * 32
    accounts = [Address(Account.create().address) for _ in range(1024)]
    _send(
        w3, committer, ledger.functions.commitRound(run, 0, b"\0" * 32, b"\x01" * 32, 0, b"\0" * 32)
    )
    _send(
        w3,
        committer,
        ledger.functions.commitRound(
            run, 1, _tree(accounts[:1], 7).root, b"\x02" * 32, 1, b"\x03" * 32
        ),
    )
    one = _send(
        w3,
        committer,
        ledger.functions.commitRound(
            run, 2, _tree(accounts[:1], 9).root, b"\x04" * 32, 1, b"\x05" * 32
        ),
    )
    many = _send(
        w3,
        committer,
        ledger.functions.commitRound(
            run, 3, _tree(accounts, 9).root, b"\x06" * 32, 1024, b"\x07" * 32
        ),
    )
    log.info("commitRound tx gas: 1 node %d, 1024 nodes %d", one, many)
    # Only calldata can differ (a zero byte costs 4 gas, a non-zero one 16).
    assert abs(one - many) <= 12 * 32
    assert many < 65_000


def test_claim_gas_on_1024_account_tree(deployment: Deployment, chain: AnvilProcess) -> None:
    w3 = chain.w3
    ledger: Contract = w3.eth.contract(
        address=deployment.address("ContributionLedger"), abi=abi("ContributionLedger")
    )
    dist: Contract = w3.eth.contract(
        address=deployment.address("RewardDistributor"), abi=abi("RewardDistributor")
    )
    token: Contract = w3.eth.contract(
        address=deployment.address("ModelShareToken"), abi=abi("ModelShareToken")
    )
    key = next(k for a, k in chain.accounts if a == deployment.committer)
    committer = Account.from_key(key)
    payer = Account.from_key(chain.accounts[4][1])  # anyone may submit a claim
    run = b"\x43" * 32
    accounts = [Address(Account.create().address) for _ in range(1024)]
    first_tree = _tree(accounts, 10**18)
    _send(
        w3,
        committer,
        ledger.functions.commitRound(run, 1, first_tree.root, b"\x01" * 32, 1, b"\0" * 32),
    )
    other, pick = accounts[3], accounts[517]
    _send(
        w3,
        payer,
        dist.functions.claim(other, first_tree.amount_of(other), first_tree.proof(other)),
        CLAIM_GAS,
    )
    first = _send(
        w3,
        payer,
        dist.functions.claim(pick, first_tree.amount_of(pick), first_tree.proof(pick)),
        CLAIM_GAS,
    )
    later_tree = _tree(accounts, 2 * 10**18)
    _send(
        w3,
        committer,
        ledger.functions.commitRound(run, 2, later_tree.root, b"\x02" * 32, 1, b"\0" * 32),
    )
    later = _send(
        w3,
        payer,
        dist.functions.claim(pick, later_tree.amount_of(pick), later_tree.proof(pick)),
        CLAIM_GAS,
    )
    log.info("claim tx gas on a 1,024-account tree: first %d, later %d", first, later)
    assert token.functions.balanceOf(pick).call() == later_tree.amount_of(pick)
    assert token.functions.getVotes(pick).call() == later_tree.amount_of(pick)
    assert later < first < 210_000
    assert later < 135_000
