"""A failed replay audit ends in a pending slash on chain: the ledger's slasher key proposes it
with the fraud record's evidence hash, the node is frozen, its reward is withheld (never in a
rewards tree), and a ledger that lost the proposal's hash adopts it instead of proposing twice."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, select

from ledger.models import FraudRecord
from protocol.deployment import abi
from protocol.eip712 import keccak256
from tests.redteam.network import Network
from tests.redteam.sim import run

pytestmark = [pytest.mark.anvil]


def _stake_manager(net: Network):  # type: ignore[no-untyped-def]
    return net.anvil.w3.eth.contract(  # type: ignore[call-overload]
        address=net.dep.address("StakeManager"), abi=abi("StakeManager")
    )


def test_failed_audit_proposes_a_slash_with_the_fraud_evidence(slashing_network: Network) -> None:
    net = slashing_network
    out = run(net, extra_honest_rounds=0, only=["copy_exact"])
    assert out["caught"] == 1 and out["honest_penalised"] == 0, out
    net.ledger.tick()  # the slash step runs after scoring in every tick
    copier = next(n for n in net.nodes if n.strategy.name == "copy_exact")
    (record,) = [f for f in net.client.get("/v1/frauds").json() if f["node"] == copier.address]
    assert record["slash_tx"] is not None, record
    # the evidence hash on chain is the keccak of the evidence the ledger serves
    evidence = json.dumps(record["evidence"], sort_keys=True, default=str)
    assert "0x" + keccak256(evidence.encode()).hex() == record["evidence_hash"]

    sm = _stake_manager(net)
    receipt = net.anvil.w3.eth.get_transaction_receipt(record["slash_tx"])
    (event,) = sm.events.SlashProposed().process_receipt(receipt)
    proposal = sm.functions.slashProposal(event["args"]["proposalId"]).call()
    node_id, executable_at, status, reporter, amount, evidence_hash = proposal
    assert status == 1  # pending: inside the dispute window, vetoable
    assert int(reporter, 16) == 0  # the ledger claims no reporter share
    assert node_id == sm.functions.nodeIdOf(copier.address).call()
    assert "0x" + bytes(evidence_hash).hex() == record["evidence_hash"]
    staked = sm.functions.nodes(copier.address).call()[2]
    assert amount == staked * net.ledger.settings.slash_bps // 10_000 > 0
    assert executable_at > net.anvil.w3.eth.get_block("latest")["timestamp"]
    # frozen: its operator cannot start unstaking while the slash is pending
    frozen = keccak256(b"NodeFrozen(address)")[:4].hex()
    with pytest.raises(Exception, match=frozen):
        sm.functions.requestUnstake(copier.address, 1).estimate_gas({"from": copier.key.operator})

    # the reward is withheld: recorded on the fraud record, zero in every receipt, not claimable
    assert int(record["withheld"]) > 0
    receipts = net.client.get(f"/v1/rewards/{copier.key.payout}").json()
    assert all(r["reward"] == "0" for r in receipts["receipts"]), receipts
    assert receipts["cumulative_amount"] == "0" and receipts["proof"] == [], receipts

    # a ledger that crashed before saving the transaction hash adopts its proposal on chain
    count = sm.functions.proposalCount().call()
    with Session(net.ledger.engine) as session:
        row = session.exec(select(FraudRecord).where(FraudRecord.node == copier.address)).one()
        row.slash_tx = None
        session.add(row)
        session.commit()
    assert net.ledger.slasher is not None
    assert net.ledger.slasher.tick() == [record["slash_tx"]]
    assert sm.functions.proposalCount().call() == count


def test_without_slasher_role_the_fraud_stays_recorded_and_health_says_why(
    slashing_network: Network,
) -> None:
    net = slashing_network
    sm = _stake_manager(net)
    assert net.ledger.slasher is not None
    slasher = net.ledger.slasher.address
    timelock = net.dep.address("TimelockController")
    net.anvil.call("anvil_impersonateAccount", [timelock])
    tx = sm.functions.revokeRole(sm.functions.SLASHER_ROLE().call(), slasher).transact(
        {"from": timelock}
    )
    assert net.anvil.w3.eth.wait_for_transaction_receipt(tx)["status"] == 1
    net.anvil.call("anvil_stopImpersonatingAccount", [timelock])
    count = sm.functions.proposalCount().call()
    run(net, extra_honest_rounds=0, only=["copy_exact"])
    net.ledger.tick()
    copier = next(n for n in net.nodes if n.strategy.name == "copy_exact")
    (record,) = [f for f in net.client.get("/v1/frauds").json() if f["node"] == copier.address]
    assert record["slash_tx"] is None
    assert sm.functions.proposalCount().call() == count
    assert "SLASHER_ROLE" in net.ledger.step_errors.get("slash", ""), net.ledger.step_errors
