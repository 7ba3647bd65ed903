"""A full round on the real chain: close, score (levels 1-2), commit, rewards proof, real claim."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from web3 import Web3

from bench.harness.nodes import attestation, contract, gradient_blob, h
from ledger.core.models import utcnow
from ledger.service import Ledger
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, join, tick_until, upload_headers


def _upload(client: TestClient, seed: int, by: tuple, scale: float = 1.0) -> str:  # type: ignore[type-arg]
    digest, data, _ = gradient_blob(seed, scale=scale)
    r = client.put(f"/v1/blobs/{digest}", content=data, headers=upload_headers(*by, digest))
    assert r.status_code == 201, r.text
    return digest


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_round_scored_committed_and_claimed(
    client, ledger: Ledger, started_run, nodes, domain, chain, deployment
) -> None:
    members = [n.address for n in nodes]
    for node in nodes:  # members are the nodes that joined before the round started
        assert join(client, node, started_run, 1, domain).status_code == 202
    honest = _upload(client, 1, (nodes[0], domain))
    copy_of_honest = honest  # node 2 attests the very same pseudo-gradient
    zero = _upload(client, 3, (nodes[2], domain), scale=0.0)
    result = h("result-1")
    atts = [
        attestation(
            nodes[0],
            run_id=started_run,
            round_=1,
            base=GENESIS,
            result=result,
            pseudo_gradient=honest,
            tokens=4000,
        ),
        attestation(
            nodes[1],
            run_id=started_run,
            round_=1,
            base=GENESIS,
            result=result,
            pseudo_gradient=copy_of_honest,
            tokens=4000,
        ),
        attestation(
            nodes[2],
            run_id=started_run,
            round_=1,
            base=GENESIS,
            result=result,
            pseudo_gradient=zero,
            tokens=4000,
        ),
    ]
    for att, node in zip(atts, nodes, strict=True):
        r = client.post("/v1/attestations", json=body(att, node.key, domain, members))
        assert r.status_code == 202, r.text
    tick_until(ledger, started_run, 1, "committed")  # close (all attested), score, commit
    rnd = client.get(f"/v1/runs/{started_run}/rounds/1").json()
    assert rnd["state"] == "committed", rnd
    assert rnd["checkpoint"] == result and rnd["tx_hash"]
    scores = {s["node"]: s for s in rnd["scores"]}
    assert scores[nodes[0].address]["verified"] is True
    assert scores[nodes[0].address]["reward"] == str(100 * 10**18)
    assert "copies" in scores[nodes[1].address]["reason"]
    assert scores[nodes[1].address]["reward"] == "0"
    assert "zero" in scores[nodes[2].address]["reason"]
    cl = contract(chain.w3, deployment, "ContributionLedger")
    run_bytes = bytes.fromhex(started_run[2:])
    assert cl.functions.lastRound(run_bytes).call() == 1
    assert "0x" + cl.functions.checkpointOf(run_bytes, 1).call().hex() == result
    chain.mine(1)
    tick_until(ledger, started_run, 1, "final")
    assert client.get(f"/v1/runs/{started_run}/rounds/1").json()["state"] == "final"
    # late attestation for the scored round: refused as stale (committed)
    late = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=result)
    r = client.post("/v1/attestations", json=body(late.replace(tokens=1), nodes[0].key, domain))
    assert r.json()["error"]["code"] == "stale_round"

    payout = nodes[0].payout
    rewards = client.get(f"/v1/rewards/{payout}").json()
    assert rewards["cumulative_amount"] == str(100 * 10**18)
    index, finalized_at, revoked, budget = cl.functions.rootInfo(
        bytes.fromhex(rewards["root"][2:])
    ).call()
    assert index > 0 and not revoked and budget >= 100 * 10**18  # the round's reward, on chain
    # the answer says from when the root pays (its dispute window's end), and so does the receipt
    assert rewards["claimable_at"] == finalized_at
    assert rewards["receipts"][0]["claimable_at"] == finalized_at
    chain.increase_time(int(cl.functions.disputeWindow().call()))  # the root's dispute window
    ledger.indexer.catch_up()
    rewards = client.get(f"/v1/rewards/{payout}").json()
    assert rewards["root_state"] == rewards["receipts"][0]["root_state"] == "finalized"
    assert [rc["round"] for rc in rewards["receipts"]] == [1]
    assert rewards["receipts"][0]["claimed_tokens"] == 4000
    distributor = contract(chain.w3, deployment, "RewardDistributor")
    proof = [bytes.fromhex(p[2:]) for p in rewards["proof"]]
    tx = distributor.functions.claim(payout, 100 * 10**18, proof).transact(
        {"from": chain.accounts[0][0]}
    )
    assert chain.w3.eth.wait_for_transaction_receipt(tx)["status"] == 1
    token = contract(chain.w3, deployment, "ModelShareToken")
    assert token.functions.balanceOf(payout).call() == 100 * 10**18
    node_view = client.get(f"/v1/nodes/{nodes[0].address}").json()
    assert node_view["registered"] and node_view["active"] and node_view["rounds_worked"] == 1


def test_deadline_dissent_and_base_mismatch(client, ledger, started_run, nodes, domain) -> None:
    grads = [_upload(client, 10 + i, (nodes[i], domain)) for i in range(3)]
    absent = Web3.to_checksum_address("0x" + "ab" * 20)  # an expected member never attests
    members = [n.address for n in nodes] + [absent]
    majority, minority = h("good"), h("fork")
    specs = [(GENESIS, majority), (GENESIS, minority), (h("wrong-base"), majority)]
    for node, grad, (base, result) in zip(nodes, grads, specs, strict=True):
        att = attestation(
            node,
            run_id=started_run,
            round_=1,
            base=base,
            result=result,
            pseudo_gradient=grad,
            tokens=10**12,
        )
        r = client.post("/v1/attestations", json=body(att, node.key, domain, members))
        assert r.status_code == 202, r.text
    ledger.keeper.close_due()
    assert client.get(f"/v1/runs/{started_run}/rounds/1").json()["state"] == "open"
    ledger.keeper.close_due(now=utcnow() + timedelta(seconds=601))
    tick_until(ledger, started_run, 1, "committed")
    rnd = client.get(f"/v1/runs/{started_run}/rounds/1").json()
    assert rnd["state"] == "committed" and rnd["checkpoint"] == majority
    scores = {s["node"]: s for s in rnd["scores"]}
    assert scores[nodes[0].address]["verified"] is True
    assert scores[nodes[0].address]["verified_tokens"] < 10**12  # capped by the round's time
    assert "credited" in scores[nodes[0].address]["reason"]
    assert "disagrees with the majority" in scores[nodes[1].address]["reason"]
    assert "not the committed checkpoint" in scores[nodes[2].address]["reason"]
    assert scores[nodes[0].address]["reward"] == str(100 * 10**18)
