"""The golden vectors against the deployed contracts on a real anvil.

ContributionLedger must hash every vector's attestation exactly as Python does (same struct hash,
same domain separator layout) and accept/refuse the same signatures; RewardDistributor must
accept the vector trees' proofs after a commitRound of their roots, paying within the committed
budget and refusing (BudgetExceeded) beyond it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from eth_account import Account

from protocol.attestation import ComputeAttestation
from protocol.chain import ChainClient
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.eip712 import keccak256
from protocol.errors import ContractRevertError
from protocol.node_key_proof import NodeKeyProof
from protocol.signing import SECP256K1_N, sign_attestation
from protocol.types import Address, Bytes32, RoundNumber, RunId
from reference.settings import TrainingSettings
from tests.vectors import generate

pytestmark = pytest.mark.anvil

ATTESTATIONS: list[dict[str, Any]] = json.loads(generate.ATTESTATION_FILE.read_text())
TREES: list[dict[str, Any]] = json.loads(generate.REWARDS_FILE.read_text())


@pytest.fixture
def committer(chain: AnvilProcess, deployment: Deployment) -> ChainClient:
    key = dict(chain.accounts)[deployment.committer]
    return ChainClient(chain.rpc_url, deployment, Account.from_key(key))


def test_domain_matches_erc5267(committer: ChainClient) -> None:
    _, name, version, chain_id, contract, salt, extensions = committer.call(
        "ContributionLedger", "eip712Domain"
    )
    domain = committer.attestation_domain()
    assert (name, version, chain_id, contract) == (
        "coloco",
        "1",
        domain.chain_id,
        domain.verifying_contract,
    )
    assert bytes(salt) == bytes(32) and list(extensions) == []


def test_every_vector_hashes_and_verifies_on_chain(committer: ChainClient) -> None:
    domain = committer.attestation_domain()
    for case in ATTESTATIONS:
        attestation, vector_domain = ComputeAttestation.from_typed_data(case["typed_data"])
        struct_hash = bytes.fromhex(case["struct_hash"][2:])
        onchain = committer.hash_attestation(attestation)
        assert onchain == keccak256(b"\x19\x01" + domain.separator + struct_hash), case["name"]
        assert onchain == attestation.digest(domain), case["name"]
        key = bytes.fromhex(case["private_key"][2:])
        signature = sign_attestation(attestation, domain, key)
        assert committer.recover_attestation_onchain(attestation, signature) == case["signer"]
        if vector_domain == domain:  # the vector was made for exactly this deployment
            assert onchain.hex() == case["digest"][2:]
        else:  # the vector's own signature is for another domain: the contract refuses it
            with pytest.raises(ContractRevertError) as info:
                committer.recover_attestation_onchain(
                    attestation, bytes.fromhex(case["signature"][2:])
                )
            assert info.value.error_name == "WrongSigner", case["name"]
            assert info.value.error_args[1] == case["signer"]


def test_contract_refuses_what_python_refuses(committer: ChainClient) -> None:
    case = ATTESTATIONS[2]
    attestation, _ = ComputeAttestation.from_typed_data(case["typed_data"])
    domain = committer.attestation_domain()
    signature = sign_attestation(attestation, domain, bytes.fromhex(case["private_key"][2:]))
    s = int.from_bytes(signature[32:64], "big")
    high_s = signature[:32] + (SECP256K1_N - s).to_bytes(32, "big") + bytes((55 - signature[64],))
    for bad in (high_s, signature[:64] + bytes((signature[64] - 27,)), signature[:64]):
        with pytest.raises(ContractRevertError) as info:
            committer.recover_attestation_onchain(attestation, bad)
        assert info.value.error_name == "InvalidSignature"


@pytest.mark.parametrize("tree", TREES, ids=[f"{len(t['values'])}-leaves" for t in TREES])
def test_distributor_accepts_vector_proofs(
    committer: ChainClient, chain: AnvilProcess, tree: dict[str, Any]
) -> None:
    run = RunId(generate.vector_bytes32(f"onchain/{len(tree['values'])}"))
    root = Bytes32(bytes.fromhex(tree["root"][2:]))
    budget = TrainingSettings.read(committer).reward_per_round
    committer.commit_round(
        run, RoundNumber(0), rewards_root=root, checkpoint_hash=Bytes32(b"\x01" * 32),
        total_work=1, attestations_root=Bytes32(bytes(32)), reward_total=budget,
    )  # fmt: skip
    status = committer.root_status(root)
    assert status.index > 0 and status.budget == budget
    chain.increase_time(committer.dispute_window())
    paid = int(committer.call("RewardDistributor", "totalClaimed"))
    claimer = ChainClient(
        chain.rpc_url, committer.deployment, Account.from_key(chain.accounts[5][1])
    )
    entries = tree["proofs"]
    picks = entries if len(entries) <= 3 else [entries[0], entries[1], *entries[2:130:25]]
    for entry in picks:
        account, amount = Address(entry["value"][0]), int(entry["value"][1])
        proof = [bytes.fromhex(p[2:]) for p in entry["proof"]]
        if amount == 0:
            expected: str | None = "NothingToClaim"  # proof accepted, nothing owed
        elif paid + amount > budget:
            expected = "BudgetExceeded"  # proof accepted, beyond the committed budget
        else:
            expected = None
        if expected is None:
            claimer.claim(account, amount, proof)
            paid += amount
            assert claimer.claimed(account) == amount
            assert claimer.token_balance(account) == amount
        else:
            with pytest.raises(ContractRevertError) as info:
                claimer.claim(account, amount, proof)
            assert info.value.error_name == expected
        if amount > 0:  # a wrong amount with the same proof is refused as InvalidProof
            with pytest.raises(ContractRevertError) as info:
                claimer.claim(account, amount - 1, proof)
            assert info.value.error_name == "InvalidProof"
            assert info.value.error_args == (account, amount - 1)


PROOFS: list[dict[str, Any]] = json.loads(generate.NODE_KEY_PROOF_FILE.read_text())


def test_node_key_proofs_hash_identically_on_chain(committer: ChainClient) -> None:
    """Python's NodeKeyProof digest == the deployed StakeManager's, for every vector's message."""
    domain = committer.key_proof_domain()
    for case in PROOFS:
        proof = NodeKeyProof.from_json(case["typed_data"]["message"])
        fields = (proof.operator, proof.payout, proof.nonce, proof.deadline)
        onchain = bytes(committer.call("StakeManager", "hashNodeKeyProof", fields))
        assert onchain == proof.digest(domain), case["name"]


def test_register_accepts_a_python_signed_proof_only_for_its_operator(
    chain: AnvilProcess, deployment: Deployment
) -> None:
    operator = ChainClient(chain.rpc_url, deployment, Account.from_key(chain.accounts[6][1]))
    key = generate.vector_key("onchain/node-key")
    payout = Address(chain.accounts[6][0])
    now = int(operator.call("ModelShareToken", "clock"))
    # a proof signed for another operator is refused: WrongKeySigner
    node, proof, sig = operator.sign_node_key_proof(
        key, Address(chain.accounts[7][0]), payout, now + 60
    )
    with pytest.raises(ContractRevertError) as info:
        operator.transact("StakeManager", "register", node, payout, proof.deadline, sig)
    assert info.value.error_name == "WrongKeySigner"
    operator.register_node(key, payout, operator=Address(chain.accounts[6][0]))
    assert operator.node_info(node).operator == chain.accounts[6][0]
    assert int(operator.call("StakeManager", "nonces", node)) == 1
