"""A failed replay audit ends in a pending slash on chain: the ledger's slasher key proposes it
with the fraud record's evidence hash, the node is frozen, its reward is withheld (never in a
rewards tree), and a ledger that lost the proposal's hash adopts it instead of proposing twice."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session, select

from bench.redteam.config import NetConfig
from bench.redteam.realnet import RealNet
from bench.redteam.realnet import run as run_real
from ledger.core.models import FraudRecord
from protocol.deployment import Deployment, abi
from protocol.devnet import AnvilProcess
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
    net.anvil.transact_as(timelock, sm, "revokeRole", sm.functions.SLASHER_ROLE().call(), slasher)
    count = sm.functions.proposalCount().call()
    run(net, extra_honest_rounds=0, only=["copy_exact"])
    net.ledger.tick()
    copier = next(n for n in net.nodes if n.strategy.name == "copy_exact")
    (record,) = [f for f in net.client.get("/v1/frauds").json() if f["node"] == copier.address]
    assert record["slash_tx"] is None
    assert sm.functions.proposalCount().call() == count
    assert "SLASHER_ROLE" in net.ledger.step_errors.get("slash", ""), net.ledger.step_errors


@pytest.fixture
def slashing_real_net(
    chain: AnvilProcess, deployment: Deployment, tmp_path: Path
) -> Iterator[RealNet]:
    """Real node processes; the ledger holds a slasher key that governance granted."""
    dep_path = tmp_path / "deployment.json"
    deployment.save(dep_path)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cfg = NetConfig(audit_fraction=0.1, slasher_key="0x" + os.urandom(32).hex())
    net = RealNet(chain, deployment, dep_path, tmp_path, cfg)
    with net.running():
        yield net


@pytest.mark.slow  # ~1 min of real processes; make test's real-node red team (test_redteam's
# quick subset) already shows other_data replayed and failed, the in-process tests the slash
def test_real_node_training_on_other_data_is_slashed(slashing_real_net: RealNet) -> None:
    """An established real node trains on data other than its declared shard: the first-batch
    signature sends it to the replay (whatever the 10% draw), the replay fails, the reward is
    withheld and the ledger's background worker proposes the slash with the fraud evidence."""
    net = slashing_real_net
    out = run_real(net, ["other_data"], timeout=600)
    assert out["caught"] == 1 and out["honest_penalised"] == 0, out
    cheater = out["attackers"]["other_data"]["address"]
    deadline = time.monotonic() + 120
    while True:  # the slash step runs in the ledger's own ticks
        records = [f for f in net.http.get("/v1/frauds").json() if f["node"] == cheater]
        if records and records[0]["slash_tx"] is not None:
            break
        assert time.monotonic() < deadline, records
        time.sleep(0.25)
    (record,) = records
    sm = net.anvil.w3.eth.contract(  # type: ignore[call-overload]
        address=net.dep.address("StakeManager"), abi=abi("StakeManager")
    )
    receipt = net.anvil.w3.eth.get_transaction_receipt(record["slash_tx"])
    (event,) = sm.events.SlashProposed().process_receipt(receipt)
    proposal = sm.functions.slashProposal(event["args"]["proposalId"]).call()
    assert proposal[2] == 1  # pending, inside the dispute window
    assert proposal[0] == sm.functions.nodeIdOf(cheater).call()
    assert "0x" + bytes(proposal[5]).hex() == record["evidence_hash"]
    assert int(record["withheld"]) > 0
    (attack,) = out["attackers"]["other_data"]["rounds"]
    view = net.http.get(f"/v1/runs/{net.run_id}/rounds/{attack}").json()
    (score,) = [s for s in view["scores"] if s["node"] == cheater]
    assert score["reward"] == "0" and not score["verified"], score
    why = score["reason"]
    assert why.startswith("[audit_failed]") and "first batch of its shard" in why, why
