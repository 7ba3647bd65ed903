"""The demo's capital and code contributors: a backer funds the run, two developers submit code.

Every action is the actor's public command, printed as `$ coloco fund ...`, `$ coloco code ...`,
`$ coloco gov vote|queue|execute` (the demo's Shell): the backer deposits ETH while the run
trains; the ledger pays it to the compute nodes in ETH roots; after training, the committee
approves one contribution, a governance vote (`coloco code propose`, holders of all three kinds
voting) approves the other, nodes claim their ETH and the backer its vested capital ownership
(minted into RunFunding's escrow as each round's ETH root accrues the capital pool).
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
from coloco_cli.common import fmt_units
from coloco_cli.demo.actors import payout_key
from coloco_cli.demo.shell import Secret
from coloco_cli.fund import ops as fund
from coloco_cli.gov.ops import proposal_state
from coloco_cli.node.ops import utc
from protocol.errors import ColocoError
from protocol.types import Address

if TYPE_CHECKING:
    from coloco_cli.demo.actors import Actor
    from coloco_cli.demo.net import DemoNet
    from coloco_cli.demo.shell import Shell

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
    lessee: Wallet = field(default_factory=Wallet.new)  # the organiser's lease (demo/lease.py)
    code_ids: list[int] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)

    @property
    def backer_key(self) -> Secret:
        return Secret(self.backer.key, "BACKER_KEY")

    @property
    def reviewer_key(self) -> Secret:
        return Secret(self.reviewer.key, "REVIEWER_KEY")

    @property
    def lessee_key(self) -> Secret:
        return Secret(self.lessee.key, "LESSEE_KEY")

    def dev_key(self, i: int) -> Secret:
        return Secret(self.devs[i].key, f"DEV_KEY_{i + 1}")

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


def fund_and_submit(
    net: DemoNet, shell: Shell, run_id: bytes, cap: Capital, rounds: int
) -> list[str]:
    """The organiser opens funding, the backer deposits, both developers submit code; each step
    is the actor's `coloco fund ...` / `coloco code ...` command."""
    for w in (cap.backer, cap.reviewer, *cap.devs):
        net.fund(w.address)
    rid = "0x" + run_id.hex()
    organiser = Secret(net.anvil.accounts[1][1], "COMMITTER_KEY")  # the ledger's committer
    opened = shell.json(
        "fund", "open", rid, "--end-in", FUNDING_S, "--eth-per-round",
        fmt_units(DEPOSIT_WEI // rounds), "--private-key", organiser,
    )  # fmt: skip
    shell.json("fund", "deposit", rid, fmt_units(DEPOSIT_WEI), "--private-key", cap.backer_key)
    steps = [
        f"run open for deposits until {utc(int(opened['funding_end']))} (the organiser); "
        f"backer {cap.backer.address[:10]}… deposited {DEPOSIT_WEI / 1e18:g} ETH",
    ]
    for i, dev in enumerate(cap.devs):
        commit = keccak(text=f"demo commit {i}")[:20].hex()
        sub = shell.json(
            "code", "submit", rid, "--repo", REPO, "--commit", commit,
            "--description", f"{REPO[:-4]}/pull/{i + 1}", "--private-key", cap.dev_key(i),
        )  # fmt: skip
        cap.code_ids.append(int(sub["id"]))
        steps.append(
            f"developer {dev.address[:10]}… submitted commit {commit[:10]}… (#{sub['id']})"
        )
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
    tables: ledger/reads/receipts.py), or after `timeout` seconds (the last answer)."""
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


def settle(
    net: DemoNet, shell: Shell, run_id: bytes, cap: Capital, *, nodes: list[Actor], rounds: int
) -> list[str]:
    """After training: escrows, ETH claims, the committee's and the vote's approvals, vesting."""
    rid = "0x" + run_id.hex()
    last = _wait_eth_roots(net, rid, rounds)
    steps = [f"ledger committed ETH roots up to round {last}"]
    _pass(net, FUNDING_S + VESTING_S + 5)  # funding ended, vesting done, dispute windows passed
    eth_paid = 0
    head = net.chain().block_number()
    _wait_indexed(net, f"/v1/funding/{rid}/eth/{nodes[0].payout_address}", head)
    for actor in nodes:
        got = shell.json("fund", "claim", rid, "--private-key", payout_key(actor))
        eth_paid += int(got["eth"]["eth_paid_wei"])
    steps.append(f"{len(nodes)} nodes claimed {eth_paid / 1e18:.4f} ETH for compute")
    first, second = cap.code_ids
    shell.json(
        "code", "approve", first, fmt_units(CODE_BY_COMMITTEE), "--private-key", cap.reviewer_key
    )
    shell.json("code", "claim", first, "--private-key", cap.dev_key(0))
    steps.append(f"contribution #{first} approved by the committee and claimed")
    vested = shell.json(
        "fund", "claim", rid, "--no-eth", "--vested", "--private-key", cap.backer_key
    )["vested"]
    steps.append(f"backer claimed {int(vested['capital_paid']) / 1e18} CMS of vested capital")
    vote = _vote_code(net, shell, cap, nodes=nodes, cid=second, run_id=run_id)
    shell.json("code", "claim", second, "--private-key", cap.dev_key(1))
    steps.append(
        f"proposal approveByVote({second}, 8 CMS) executed; contribution #{second} claimed"
    )
    cap.outcome = _report(net, rid, cap, nodes, vote)
    return steps


def _vote_code(
    net: DemoNet, shell: Shell, cap: Capital, *, nodes: list[Actor], cid: int, run_id: bytes
) -> dict[str, Any]:
    """A governance proposal approving contribution `cid` (`coloco code propose`), voted by all
    three kinds of holder (`coloco gov vote`), queued and executed (`coloco gov queue|execute`)."""
    gov = net.deployment.governance
    proposer = payout_key(nodes[0])
    prop = shell.json(
        "code", "propose", cid, fmt_units(CODE_BY_VOTE), "--description",
        f"coloco demo: pay code contribution #{cid} 8 CMS from the code pool",
        "--private-key", proposer,
    )  # fmt: skip
    pid, description = str(prop["proposal_id"]), str(prop["description"])
    _pass(net, int(gov.get("voting_delay", 1)) + 1)
    kinds: list[tuple[str, Secret, str]] = [
        ("compute", payout_key(a), a.payout_address) for a in nodes
    ]
    kinds += [("code", cap.dev_key(0), cap.devs[0].address)]
    kinds += [("capital", cap.backer_key, cap.backer.address)]
    viewer = net.chain()
    voters: list[dict[str, str]] = []
    for kind, key, address in kinds:
        votes = int(viewer.model_share_token.get_votes(Address(address)))
        if votes == 0:
            continue
        shell.json(
            "gov", "vote", pid, "--support", "for",
            "--reason", f"demo: a {kind} contributor pays for good code", "--private-key", key,
        )  # fmt: skip
        # what the voter holds and how it earned it: its kind is a fact of the chain
        balance = int(viewer.token_balance(Address(address)))
        voters.append(
            {"kind": kind, "address": address, "votes": str(votes), "balance": str(balance),
             "earned_by": _earned_by(viewer, kind, address, cap, run_id)}
        )  # fmt: skip
    _pass(net, int(gov.get("voting_period", 20)) + 1)
    state = proposal_state(viewer, int(pid))
    if state != "Succeeded":
        raise ColocoError(f"code proposal {pid} ended {state}, not Succeeded")
    shell.json("gov", "queue", pid, "--private-key", proposer)
    _pass(net, int(gov.get("timelock_delay", 1)) + 1)
    shell.json("gov", "execute", pid, "--private-key", proposer)
    tally = viewer.model_governor.proposal_votes(int(pid))
    return {
        "proposal_id": pid,
        "description": description,
        "state": proposal_state(viewer, int(pid)),
        "votes_for": str(tally.for_votes),
        "votes_against": str(tally.against_votes),
        "voters": voters,
        "kinds_voting": sorted({v["kind"] for v in voters}),
    }


def _earned_by(chain: Any, kind: str, address: str, cap: Capital, run_id: bytes) -> str:
    """Where a voter's tokens came from, read from the contract that paid them."""
    if kind == "capital":
        claimed = int(chain.run_funding.capital_claimed(run_id, Address(address)))
        return f"RunFunding.capitalClaimed {claimed}"
    if kind == "code":
        paid = [
            f"#{cid} {int(c.amount)}"
            for cid in cap.code_ids
            for c in [chain.code_registry.contribution_of(cid)[0]]
            if str(c.contributor) == address and c.status == 4  # Status.Claimed
        ]
        return "CodeRegistry claimed " + ", ".join(paid)
    return f"RewardDistributor.claimed {int(chain.claimed(Address(address)))}"


def _report(
    net: DemoNet, rid: str, cap: Capital, nodes: list[Actor], vote: dict[str, Any]
) -> dict[str, Any]:
    viewer = net.chain()

    def balance(address: str) -> int:
        return int(viewer.token_balance(Address(address)))

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
