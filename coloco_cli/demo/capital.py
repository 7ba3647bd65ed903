"""The demo's capital and code contributors: a backer funds the run, two developers submit code.

Everything goes through the public command paths (`coloco fund ...`, `coloco code ...`,
`coloco gov vote|queue|execute`): the backer deposits ETH while the run trains; the ledger pays
it to the compute nodes in ETH roots; after training, the committee approves one contribution, a
governance vote (with holders of all three kinds voting) approves the other, nodes claim their
ETH and the backer its vested capital ownership (minted into RunFunding's escrow as each round's
ETH root accrues the capital pool).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eth_account import Account
from eth_utils.crypto import keccak

from coloco_cli.code import ops as code
from coloco_cli.fund import ops as fund
from coloco_cli.gov.ops import cast_vote, execute_proposal, proposal_state, queue_proposal
from protocol.errors import ColocoError

if TYPE_CHECKING:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.net import DemoNet

log = logging.getLogger(__name__)

DEPOSIT_WEI = 2 * 10**18
FUNDING_S = 30  # deposits close this long after the run opens
VESTING_S = 30
CODE_BY_COMMITTEE = 5 * 10**18  # within the committee's threshold
CODE_BY_VOTE = 8 * 10**18  # above it: a governance vote
REPO = "https://github.com/coloco-project/coloco.git"


@dataclass
class Wallet:
    address: str
    key: str

    @classmethod
    def new(cls) -> Wallet:
        acct = Account.create()
        return cls(str(acct.address), "0x" + bytes(acct.key).hex())


@dataclass
class Capital:
    """The backer, the two developers and the review committee member of the demo."""

    backer: Wallet = field(default_factory=Wallet.new)
    devs: list[Wallet] = field(default_factory=lambda: [Wallet.new(), Wallet.new()])
    reviewer: Wallet = field(default_factory=Wallet.new)
    code_ids: list[int] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)

    def deploy_env(self) -> dict[str, str]:
        """The deployment's capital settings (read by contracts/script/CapitalDeploy.sol)."""
        return {
            "COLOCO_OWNERSHIP_SPLIT": "8000,1000,1000",
            "COLOCO_CODE_COMMITTEE": self.reviewer.address,
            "COLOCO_CODE_VOTE_THRESHOLD": str(CODE_BY_COMMITTEE),
            "COLOCO_VESTING_PERIOD": str(VESTING_S),
            "COLOCO_FUNDING_DISPUTE_WINDOW": "1",
        }


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ for the block only (the deploy passes its env to forge)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fund_and_submit(net: DemoNet, run_id: bytes, cap: Capital, rounds: int) -> list[str]:
    """The organiser opens funding, the backer deposits, both developers submit code."""
    for w in (cap.backer, cap.reviewer, *cap.devs):
        net.fund(w.address)
    rid = "0x" + run_id.hex()
    organiser = net.chain(net.anvil.accounts[1][1])  # the ledger's committer runs the run
    now = int(organiser.w3.eth.get_block("latest")["timestamp"])
    fund.open_run(organiser, rid, now + FUNDING_S, DEPOSIT_WEI // rounds)
    fund.deposit(net.chain(cap.backer.key), rid, DEPOSIT_WEI)
    steps = [
        f"coloco fund open {rid[:14]}… --end-in {FUNDING_S} (the organiser)",
        f"coloco fund deposit {rid[:14]}… 2 (backer {cap.backer.address[:10]}…)",
    ]
    for i, dev in enumerate(cap.devs):
        commit = keccak(text=f"demo commit {i}")[:20].hex()
        sub = code.submit(net.chain(dev.key), rid, REPO, commit, f"{REPO[:-4]}/pull/{i + 1}")
        cap.code_ids.append(int(sub["id"]))
        steps.append(f"coloco code submit … --commit {commit[:10]}… -> contribution #{sub['id']}")
    return steps


def _wait_eth_roots(net: DemoNet, rid: str, rounds: int, timeout: float = 60.0) -> int:
    viewer = net.chain()
    deadline = time.monotonic() + timeout
    st = fund.status(viewer, rid)
    while time.monotonic() < deadline:
        st = fund.status(viewer, rid)
        if st["last_eth_round"] is not None and st["last_eth_round"] >= rounds:
            break
        time.sleep(0.5)
    return int(st["last_eth_round"] or 0)


def _wait_indexed(net: DemoNet, path: str, block: int, timeout: float = 60.0) -> Any:
    """GET `path` from the ledger once its indexer has reached `block` (receipts come from its
    tables: ledger/receipts.py), or after `timeout` seconds (the last answer)."""
    deadline = time.monotonic() + timeout
    while True:
        got = net.ledger_get(path)
        seen = (got.get("as_of") or (got.get("other_kinds") or {}).get("as_of") or {}).get("block")
        if (seen is not None and seen >= block) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def _pass(net: DemoNet, seconds: int) -> None:
    """Let `seconds` pass on the devnet clock (and blocks, whichever clock the Governor uses)."""
    net.advance_time(seconds)
    net.mine(seconds)


def settle(net: DemoNet, run_id: bytes, cap: Capital, nodes: list[Actor], rounds: int) -> list[str]:
    """After training: escrows, ETH claims, the committee's and the vote's approvals, vesting."""
    rid = "0x" + run_id.hex()
    last = _wait_eth_roots(net, rid, rounds)
    steps = [f"ledger committed ETH roots up to round {last}"]
    _pass(net, FUNDING_S + VESTING_S + 5)  # funding ended, vesting done, dispute windows passed
    payer = net.chain(cap.backer.key)
    eth_paid = 0
    head = net.chain().block_number()
    _wait_indexed(net, f"/v1/funding/{rid}/eth/{nodes[0].payout_address}", head)
    for actor in nodes:
        got = fund.claim_eth(net.chain(actor.payout_key), net.ledger_url, rid, actor.payout_address)
        eth_paid += int(got["eth_paid_wei"])
    steps.append(
        f"coloco fund claim … by {len(nodes)} nodes: {eth_paid / 1e18:.4f} ETH for compute"
    )
    first, second = cap.code_ids
    code.approve(net.chain(cap.reviewer.key), first, CODE_BY_COMMITTEE)
    code.claim(net.chain(cap.devs[0].key), first)
    steps.append(f"coloco code approve {first} 5 (the committee); coloco code claim {first}")
    vested = fund.claim_vested(payer, rid, cap.backer.address)
    steps.append(
        f"coloco fund claim … --vested: backer got {int(vested['capital_paid']) / 1e18} CMS"
    )
    vote = _vote_code(net, cap, nodes, second, run_id)
    code.claim(net.chain(cap.devs[1].key), second)
    steps.append(f"proposal approveByVote({second}, 8 CMS) executed; coloco code claim {second}")
    cap.outcome = _report(net, rid, cap, nodes, vote)
    return steps


def _vote_code(
    net: DemoNet, cap: Capital, nodes: list[Actor], cid: int, run_id: bytes
) -> dict[str, Any]:
    """A governance proposal approving contribution `cid`, voted by all three kinds of holder."""
    gov = net.deployment.governance
    registry = net.chain().contract("CodeRegistry")
    proposer = net.chain(nodes[0].payout_key)
    targets = [str(registry.address)]
    calldatas = [bytes.fromhex(registry.encode_abi("approveByVote", args=[cid, CODE_BY_VOTE])[2:])]
    description = f"coloco demo: pay code contribution #{cid} 8 CMS from the code pool"
    pid = int(
        proposer.call(
            "ModelGovernor", "hashProposal", targets, [0], calldatas, keccak(text=description)
        )
    )
    proposer.transact("ModelGovernor", "propose", targets, [0], calldatas, description)
    _pass(net, int(gov.get("voting_delay", 1)) + 1)
    kinds = [("compute", a.payout_key, a.payout_address) for a in nodes]
    kinds += [("code", cap.devs[0].key, cap.devs[0].address)]
    kinds += [("capital", cap.backer.key, cap.backer.address)]
    voters: list[dict[str, str]] = []
    for kind, key, address in kinds:
        chain = net.chain(key)
        votes = int(chain.call("ModelShareToken", "getVotes", address))
        if votes == 0:
            continue
        cast_vote(chain, pid, "for", f"demo: a {kind} contributor pays for good code")
        # what the voter holds and how it earned it: its kind is a fact of the chain
        balance = int(chain.call("ModelShareToken", "balanceOf", address))
        voters.append(
            {"kind": kind, "address": address, "votes": str(votes), "balance": str(balance),
             "earned_by": _earned_by(chain, kind, address, cap, run_id)}
        )  # fmt: skip
    _pass(net, int(gov.get("voting_period", 20)) + 1)
    state = proposal_state(proposer, pid)
    if state != "Succeeded":
        raise ColocoError(f"code proposal {pid} ended {state}, not Succeeded")
    queue_proposal(proposer, pid, net.deployment.deployment_block)
    _pass(net, int(gov.get("timelock_delay", 1)) + 1)
    execute_proposal(proposer, pid, net.deployment.deployment_block)
    against, for_, _ = proposer.call("ModelGovernor", "proposalVotes", pid)
    return {
        "proposal_id": str(pid),
        "description": description,
        "state": proposal_state(proposer, pid),
        "votes_for": str(for_),
        "votes_against": str(against),
        "voters": voters,
        "kinds_voting": sorted({v["kind"] for v in voters}),
    }


def _earned_by(chain: Any, kind: str, address: str, cap: Capital, run_id: bytes) -> str:
    """Where a voter's tokens came from, read from the contract that paid them."""
    if kind == "capital":
        claimed = int(chain.call("RunFunding", "capitalClaimed", run_id, address))
        return f"RunFunding.capitalClaimed {claimed}"
    if kind == "code":
        paid = [
            f"#{cid} {int(c[2])}"
            for cid in cap.code_ids
            for c in [chain.call("CodeRegistry", "contributionOf", cid)[0]]
            if str(c[0]) == address and int(c[1]) == 4  # Status.Claimed
        ]
        return "CodeRegistry claimed " + ", ".join(paid)
    return f"RewardDistributor.claimed {int(chain.call('RewardDistributor', 'claimed', address))}"


def _report(
    net: DemoNet, rid: str, cap: Capital, nodes: list[Actor], vote: dict[str, Any]
) -> dict[str, Any]:
    viewer = net.chain()

    def balance(address: str) -> int:
        return int(viewer.call("ModelShareToken", "balanceOf", address))

    st = fund.status(viewer, rid, cap.backer.address)
    head = viewer.block_number()
    escrows = {"RunFunding": balance(str(net.deployment.address("RunFunding")))}
    return {
        "contributions": {
            "compute": str(sum(balance(a.payout_address) for a in nodes)),
            "code": str(sum(balance(d.address) for d in cap.devs)),
            "capital": str(balance(cap.backer.address)),
        },
        "eth_paid_to_compute": st["eth_paid_to_compute_wei"],
        "funding": st,
        "code_contributions": code.list_all(viewer, rid),
        "escrow_balances": {k: str(v) for k, v in escrows.items()},
        "tokens_outside_compute": str(
            sum(escrows.values())
            + balance(cap.backer.address)
            + sum(balance(d.address) for d in cap.devs)
        ),
        "three_kinds_vote": vote,
        "receipts_other_kinds": {  # GET /v1/rewards/{address}, once indexed up to the head
            who: _wait_indexed(net, f"/v1/rewards/{address}", head).get("other_kinds")
            for who, address in (
                ("backer", cap.backer.address),
                ("coder", cap.devs[0].address),
                ("node", nodes[0].payout_address),
            )
        },
    }
