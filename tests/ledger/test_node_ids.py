"""The indexer follows StakeManager's stable node ids and each root's finality, on the real chain.

A key rotation keeps the node's history under its node id and does not make it two members of
one round; a slash that names only the node id (an equivocation signed by a retired key) still
refreshes the node's stake; a committed root is pending for its dispute window, then finalized,
unless the guardian revokes it first.
"""

from __future__ import annotations

import os
from typing import Any

from eth_account import Account
from fastapi.testclient import TestClient
from web3 import Web3

from bench.harness.nodes import ETHER, NodeKey, attestation, contract, h
from ledger.chain.indexer import Indexer
from ledger.service import Ledger
from protocol.attestation import ComputeAttestation
from protocol.chain_views import attestation_tuple
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.eip712 import Eip712Domain
from protocol.node_key_proof import NodeKeyProof
from protocol.signing import sign_attestation, sign_digest
from protocol.types import Address, Bytes32
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body, join


def send(w3: Web3, fn: Any, sender: str) -> None:
    rcpt = w3.eth.wait_for_transaction_receipt(fn.transact({"from": sender}))
    assert rcpt["status"] == 1, rcpt


def _rotate(chain: AnvilProcess, deployment: Deployment, node: NodeKey) -> NodeKey:
    """The operator moves ``node`` to a fresh key (signed by the new key, as the contract wants)."""
    key = os.urandom(32)
    new = Account.from_key(key).address
    sm = contract(chain.w3, deployment, "StakeManager")
    proof = NodeKeyProof(
        operator=Address(node.operator),
        payout=Address(node.payout),
        nonce=int(sm.functions.nonces(new).call()),
        deadline=int(chain.w3.eth.get_block("latest")["timestamp"]) + 3600,
    )
    domain = Eip712Domain(
        chain_id=int(deployment.chain_id),
        verifying_contract=Address(deployment.address("StakeManager")),
    )
    signature = sign_digest(proof.digest(domain), key)
    fn = sm.functions.rotateNodeKey(node.address, new, proof.deadline, signature)
    send(chain.w3, fn, node.operator)
    return NodeKey(key=key, address=new, payout=node.payout, operator=node.operator)


def test_rotation_keeps_history_under_the_node_id_and_one_membership(
    client: TestClient,
    ledger: Ledger,
    started_run: str,
    nodes: list[NodeKey],
    domain: Eip712Domain,
    chain: AnvilProcess,
    deployment: Deployment,
) -> None:
    old = nodes[0]
    assert join(client, old, started_run, 1, domain).status_code == 202
    att = attestation(old, run_id=started_run, round_=1, base=GENESIS, result=h("r1"))
    assert client.post("/v1/attestations", json=body(att, old.key, domain)).status_code == 202
    # round 2 is joined ahead (round 1 is not committed: round 2 has not started)
    assert join(client, old, started_run, 2, domain).status_code == 202

    new = _rotate(chain, deployment, old)
    ledger.indexer.catch_up()
    snap = ledger.indexer.snapshot
    node_id = int(contract(chain.w3, deployment, "StakeManager").functions.nodeIdOf(new.address)
                  .call())  # fmt: skip
    assert node_id > 0
    assert snap.node_id_of(new.address) == snap.node_id_of(old.address) == node_id
    assert not snap.nodes[old.address].registered and snap.is_active(new.address)
    assert snap.keys_of(new.address) == sorted([old.address, new.address])

    # the history is the node's, whichever key asks
    view = client.get(f"/v1/nodes/{new.address}").json()
    assert view["node_id"] == node_id and set(view["keys"]) == {old.address, new.address}
    assert [(r["round"], r["node"]) for r in view["rounds"]] == [(1, old.address)]
    assert client.get(f"/v1/nodes/{old.address}").json()["rounds"] == view["rounds"]

    # the new key cannot make the node a second member of a round its old key joined
    r = join(client, new, started_run, 2, domain)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "node_already_joined"
    assert old.address in r.json()["error"]["message"]
    # another node still joins round 2
    assert join(client, nodes[1], started_run, 2, domain).status_code == 202

    # a restarted indexer knows the ids from its database
    restored = Indexer(ledger.engine, ledger.chain).load()
    assert restored.keys_of(new.address) == snap.keys_of(new.address)


def test_a_slash_naming_only_the_node_id_refreshes_the_current_key(
    ledger: Ledger, nodes: list[NodeKey], chain: AnvilProcess, deployment: Deployment
) -> None:
    ledger.prepare_database()
    ledger.start(background=False)
    old = nodes[1]
    new = _rotate(chain, deployment, old)
    ledger.indexer.catch_up()
    assert ledger.indexer.snapshot.nodes[new.address].staked == str(2 * ETHER)

    # the old key equivocated before the rotation: anyone reports it; the Slashed event names
    # the node id only, and the stake it takes is the node's (now under the new key)
    domain = Eip712Domain(
        chain_id=int(deployment.chain_id),
        verifying_contract=Address(deployment.address("ContributionLedger")),
    )
    run = h("equivocation-run")
    a = attestation(old, run_id=run, round_=3, base=GENESIS, result=h("x"))
    b = a.replace(result_checkpoint=Bytes32(bytes.fromhex(h("y")[2:])))
    sm = contract(chain.w3, deployment, "StakeManager")

    def signed(att: ComputeAttestation) -> tuple[Any, bytes]:
        return attestation_tuple(att), sign_attestation(att, domain, old.key)

    (ta, sa), (tb, sb) = signed(a), signed(b)
    send(chain.w3, sm.functions.reportEquivocation(ta, sa, tb, sb), chain.accounts[8][0])
    staked = int(sm.functions.nodes(new.address).call()[2])
    assert staked < 2 * ETHER  # the node lost stake on chain
    ledger.indexer.catch_up()
    assert ledger.indexer.snapshot.nodes[new.address].staked == str(staked)


def test_roots_are_pending_then_finalized_or_revoked(
    ledger: Ledger, chain: AnvilProcess, deployment: Deployment
) -> None:
    ledger.prepare_database()
    ledger.start(background=False)
    cl = contract(chain.w3, deployment, "ContributionLedger")
    window = int(cl.functions.disputeWindow().call())
    committer, guardian = deployment.committer, deployment.guardian
    run = bytes.fromhex(h("finality-run")[2:])
    roots = [bytes.fromhex(h(f"root-{i}")[2:]) for i in range(3)]
    # block times set exactly, ahead of the wall clock: the states cannot race it
    t0 = int(chain.w3.eth.get_block("latest")["timestamp"]) + 3600

    def at(ts: int, fn: Any, sender: str) -> None:
        chain.call("evm_setNextBlockTimestamp", [ts])
        send(chain.w3, fn, sender)

    def commit(round_: int, root: bytes, ts: int) -> None:
        fn = cl.functions.commitRound(run, round_, root, roots[0], 1, roots[0], 1)
        at(ts, fn, committer)

    def state(root: bytes) -> tuple[str, int | None]:
        ledger.indexer.catch_up()
        return ledger.indexer.snapshot.root_state("0x" + root.hex())

    commit(0, roots[0], t0)
    commit(1, roots[1], t0 + 1)
    assert state(roots[1]) == ("pending", t0 + 1 + window)
    assert int(cl.functions.rootInfo(roots[1]).call()[1]) == t0 + 1 + window
    at(t0 + 2, cl.functions.revokeRoot(roots[1]), guardian)
    assert state(roots[1]) == ("revoked", t0 + 1 + window)
    commit(2, roots[2], t0 + 3)
    assert state(roots[2])[0] == "pending"
    chain.call("evm_setNextBlockTimestamp", [t0 + 3 + window])
    chain.mine(1)
    assert state(roots[2]) == ("finalized", t0 + 3 + window)
    assert state(roots[1])[0] == "revoked"  # a revoked root stays revoked
    assert ledger.indexer.snapshot.root_state("0x" + "ab" * 32) == ("unknown", None)
    # a restarted indexer reads finality and revocations from its database
    restored = Indexer(ledger.engine, ledger.chain)
    restored.load()
    assert restored.snapshot.roots == ledger.indexer.snapshot.roots
