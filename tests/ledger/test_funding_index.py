"""RunFunding and CodeRegistry events indexed into ``funding_event`` on a real anvil: receipts of
all three kinds served without one RPC call, the contracts' own views matched, a reorg that
drops a deposit forgotten, and a restart that resumes without counting an event twice."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import Session, func, select

from bench.harness.nodes import contract, h, send
from ledger.chain.client import LedgerChain
from ledger.chain.indexer import CURSOR_KEY, Indexer
from ledger.core.models import Attestation, FundingEvent, KeyValue
from ledger.reads.receipts import capital_receipts, code_receipts, run_view
from protocol.devnet import AnvilProcess
from protocol.merkle import RewardsTree
from protocol.types import Address

pytestmark = pytest.mark.anvil

RUN = h("funded-run")


def _as(chain: AnvilProcess, who: str, fn: Any) -> None:
    """Sent as `who`, impersonated (the Timelock executing a vote)."""
    chain.call("anvil_impersonateAccount", [who])
    chain.call("anvil_setBalance", [who, hex(10**19)])
    send(chain.w3, fn, who)
    chain.call("anvil_stopImpersonatingAccount", [who])


class Actors:
    """The contracts and the people of a funded run (anvil accounts 5-7; 1 is the committer)."""

    def __init__(self, chain: AnvilProcess, deployment: Any) -> None:
        w3 = chain.w3
        self.chain, self.committer = chain, deployment.committer
        self.funding = contract(w3, deployment, "RunFunding")
        self.registry = contract(w3, deployment, "CodeRegistry")
        self.ledger = contract(w3, deployment, "ContributionLedger")
        self.backer, self.backer2, self.dev = (chain.accounts[i][0] for i in (5, 6, 7))
        timelock = deployment.address("TimelockController")
        cfg = contract(w3, deployment, "TrainingConfig")
        _as(chain, timelock, cfg.functions.setOwnershipSplit(8000, 1000, 1000))
        role = self.registry.functions.COMMITTEE_ROLE().call()
        _as(chain, timelock, self.registry.functions.grantRole(role, chain.accounts[8][0]))
        self.reviewer = chain.accounts[8][0]
        self.run = bytes.fromhex(RUN[2:])

    def commit_round(self, rnd: int) -> None:
        # the whole compute pool (80 CMS) under a fresh root: the code and capital pools grow
        fn = self.ledger.functions.commitRound(
            self.run,
            rnd,
            bytes(31) + bytes([rnd + 1]),
            bytes([rnd + 1]) * 32,
            1,
            bytes(32),
            80 * 10**18,
        )
        send(self.chain.w3, fn, self.committer)

    def deposit(self, who: str, wei: int) -> None:
        send(self.chain.w3, self.funding.functions.deposit(self.run), who, value=wei)

    def open(self, seconds: int = 600) -> None:
        end = self.chain.w3.eth.get_block("latest")["timestamp"] + seconds
        send(self.chain.w3, self.funding.functions.openRun(self.run, end, 10**17), self.committer)


def test_receipts_of_all_kinds_without_rpc(client, ledger, chain, deployment) -> None:  # type: ignore[no-untyped-def]
    a = Actors(chain, deployment)
    a.open()
    a.deposit(a.backer, 10**18)
    chain.increase_time(100)
    a.deposit(a.backer2, 3 * 10**18)
    a.deposit(a.backer, 10**17)
    a.commit_round(0)
    a.commit_round(1)
    submit = a.registry.functions.submit
    for i in range(3):
        send(chain.w3, submit(a.run, f"https://example.org/r{i}.git", h(f"c{i}"), "d"), a.dev)
    send(chain.w3, a.registry.functions.approve(1, 10**18), a.reviewer)
    send(chain.w3, a.registry.functions.reject(2, "duplicate of #1"), a.reviewer)
    send(chain.w3, a.registry.functions.claim(1), a.dev)
    # an ETH root for round 1 that pays one compute payout, as the ledger's settler would
    payout = chain.accounts[9][0]
    with Session(ledger.engine) as s:
        s.add(Attestation(
            run_id=RUN, round=1, node=payout, config_version=1, base_checkpoint=h("b"),
            pseudo_gradient=h("g"), data_shard=h("d"), inner_steps=1, tokens=1,
            result_checkpoint=h("r"), trace_root=h("t"), digest=h("x"), signature="0x",
            payout=payout, reward="5",
        ))  # fmt: skip
        s.commit()
    tree = RewardsTree.build([(Address(payout), 10**17)])
    commit_eth = a.funding.functions.commitEthRoot(a.run, 1, tree.root, 10**17)
    send(chain.w3, commit_eth, a.committer)
    chain.increase_time(600)  # past the funding end and the 60 s vesting period's first half
    send(chain.w3, a.funding.functions.accrueCapital(a.run, tree.root), a.backer)  # final now
    ledger.prepare_database()
    ledger.indexer.catch_up()

    def no_rpc(*args: object, **kwargs: object) -> None:
        raise AssertionError("a request made an RPC call")

    rpc, ledger.chain.client.rpc = ledger.chain.client.rpc, no_rpc
    try:
        backer = client.get(f"/v1/rewards/{a.backer}").json()["other_kinds"]
        dev = client.get(f"/v1/rewards/{a.dev}").json()["other_kinds"]
        node = client.get(f"/v1/rewards/{payout}").json()["other_kinds"]
        claim = client.get(f"/v1/funding/{RUN}/eth/{payout}").json()
        listed = client.get("/contributors?format=json").json()["contributors"]
        page = client.get(f"/contributors/{a.dev.lower()}").text
    finally:
        ledger.chain.client.rpc = rpc
    (cap,) = backer["capital"]
    assert cap["deposited_wei"] == str(11 * 10**17)
    chain_entitlement = a.funding.functions.entitlement(a.run, a.backer).call()
    assert int(cap["entitlement"]) == chain_entitlement > 0
    assert int(cap["vested"]) == a.funding.functions.vested(a.run, a.backer).call()
    assert backer["as_of"]["block"] == chain.w3.eth.block_number
    codes = {c["id"]: c for c in dev["code"]}
    assert [codes[i]["status"] for i in (1, 2, 3)] == ["claimed", "rejected", "pending"]
    assert codes[1]["amount"] == str(10**18) and codes[1]["by_vote"] is False
    assert codes[2]["reason"] == "duplicate of #1"
    (eth,) = node["eth_for_compute"]
    assert eth["cumulative_wei"] == str(10**17) and eth["root"]["root"] == "0x" + tree.root.hex()
    assert claim["root"] == "0x" + tree.root.hex() and claim["cumulative_wei"] == str(10**17)
    by_address = {c["address"]: c for c in listed}  # the dashboard, from the same tables
    assert by_address[a.backer]["kinds"] == ["capital"]
    assert by_address[a.backer]["deposited_wei"] == str(11 * 10**17)
    assert by_address[a.dev]["code_approved"] == 1 and by_address[a.dev]["code_submitted"] == 3
    assert "duplicate of #1" in page and 'class="state-claimed"' in page
    run = a.funding.functions.runOf(a.run).call()
    assert claim["run"]["total_deposited_wei"] == str(run[4])
    assert claim["run"]["capital_pool"] == str(run[8]) == str(10 * 10**18)  # from CapitalAccrued
    assert claim["run"]["last_round"] == 1


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_reorg_forgets_a_deposit_and_restart_resumes(ledger, chain, deployment) -> None:  # type: ignore[no-untyped-def]
    ledger.prepare_database()
    a = Actors(chain, deployment)
    a.open()
    indexer = Indexer(ledger.engine, ledger.chain, depth=1, rewind_blocks=8)
    indexer.catch_up()
    a.deposit(a.backer, 10**18)
    chain.mine(2)
    indexer.catch_up()

    def deposited() -> list[str]:
        with Session(ledger.engine) as s:
            return [c["deposited_wei"] for c in capital_receipts(s, a.backer)]

    assert deposited() == [str(10**18)]
    # a reorg deeper than the depth replaces the deposit's block (and the two after it)
    chain.call("anvil_reorg", [3, []])
    chain.mine(3)
    indexer.catch_up()
    assert deposited() == []
    with Session(ledger.engine) as s:
        view = run_view(s, RUN)
        assert view is not None and view.total_deposited == 0
    a.deposit(a.backer, 2 * 10**18)
    a.deposit(a.backer2, 10**18)
    chain.mine(2)
    # a restart: a new indexer on the same database, from its stored cursor
    fresh = Indexer(ledger.engine, LedgerChain(chain.rpc_url, deployment, None), depth=1)
    fresh.load()
    fresh.catch_up()
    assert deposited() == [str(2 * 10**18)]
    # and a re-walk from the deployment block (a lost cursor) adds nothing twice
    with Session(ledger.engine) as s:
        before = s.exec(select(func.count()).select_from(FundingEvent)).one()
        cursor = s.get(KeyValue, CURSOR_KEY)
        assert cursor is not None
        s.delete(cursor)
        s.commit()
    fresh.load()
    fresh.catch_up()
    with Session(ledger.engine) as s:
        assert s.exec(select(func.count()).select_from(FundingEvent)).one() == before
        view = run_view(s, RUN)
        assert view is not None and view.total_deposited == 3 * 10**18
        chain_run = a.funding.functions.runOf(a.run).call()
        assert view.weighted_time == chain_run[5]  # the capital weight, summed in chain order
        assert code_receipts(s, a.dev) == []
