"""Staked nodes on the real anvil chain and the work they sign: what the ledger benchmarks load a
ledger with (``bench.ledger``, ``bench.faults``) and the ledger tests build on.

:func:`new_node` registers a fresh hot key for an unlocked anvil account and stakes it;
:func:`attestation` is a ComputeAttestation of that node with placeholder hashes where a test or
load does not care; :func:`gradient_blob` a small pseudo-gradient with its hash and blob bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from eth_account import Account
from web3 import Web3

from protocol.attestation import ComputeAttestation
from protocol.blobs import encode_blob
from protocol.deployment import Deployment, abi
from protocol.eip712 import Eip712Domain
from protocol.hashing import hash_state_dict
from protocol.node_key_proof import NodeKeyProof
from protocol.signing import sign_digest
from protocol.types import Address

ETHER = 10**18


@dataclass(frozen=True)
class NodeKey:
    key: bytes
    address: str
    payout: str
    operator: str


def contract(w3: Web3, dep: Deployment, name: str) -> Any:
    return w3.eth.contract(address=dep.address(name), abi=abi(name))  # type: ignore[call-overload]


def send(w3: Web3, fn: Any, sender: str, value: int = 0) -> None:
    tx = fn.transact({"from": sender, "value": value})
    rcpt = w3.eth.wait_for_transaction_receipt(tx)
    assert rcpt["status"] == 1, rcpt


def new_node(
    w3: Web3, dep: Deployment, operator: str, *, stake: int = 2 * ETHER, seed: bytes | None = None
) -> NodeKey:
    """A fresh hot key, registered by ``operator`` (an unlocked anvil account) and staked."""
    key = seed or os.urandom(32)
    address = Account.from_key(key).address
    payout = Account.from_key(os.urandom(32)).address
    sm = contract(w3, dep, "StakeManager")
    proof = NodeKeyProof(
        operator=Address(operator),
        payout=Address(payout),
        nonce=int(sm.functions.nonces(address).call()),
        deadline=int(w3.eth.get_block("latest")["timestamp"]) + 3600,
    )
    domain = Eip712Domain(
        chain_id=int(dep.chain_id), verifying_contract=Address(dep.address("StakeManager"))
    )
    signature = sign_digest(proof.digest(domain), key)
    send(w3, sm.functions.register(address, payout, proof.deadline, signature), operator)
    if stake:
        send(w3, sm.functions.stake(address), operator, value=stake)
    return NodeKey(key=key, address=address, payout=payout, operator=operator)


def domain_of(dep: Deployment) -> Eip712Domain:
    return Eip712Domain(
        chain_id=int(dep.chain_id), verifying_contract=Address(dep.address("ContributionLedger"))
    )


def h(label: str) -> str:
    return "0x" + Web3.keccak(text=label).hex().removeprefix("0x")


def attestation(
    node: NodeKey,
    *,
    run_id: str,
    round_: int,
    base: str,
    result: str,
    pseudo_gradient: str | None = None,
    tokens: int = 1000,
    inner_steps: int = 50,
    config_version: int = 1,
    shard: str | None = None,
    trace_root: str | None = None,
) -> ComputeAttestation:
    return ComputeAttestation.from_json(
        {
            "runId": run_id,
            "round": round_,
            "node": node.address,
            "configVersion": config_version,
            "baseCheckpoint": base,
            "pseudoGradient": pseudo_gradient or h(f"pg-{node.address}-{round_}"),
            "dataShard": shard or h(f"shard-{node.address}-{round_}"),
            "innerSteps": inner_steps,
            "tokens": tokens,
            "resultCheckpoint": result,
            "traceRoot": trace_root or h(f"trace-{node.address}-{round_}"),
        }
    )


def gradient_blob(seed: int, *, scale: float = 1.0) -> tuple[str, bytes, dict[str, torch.Tensor]]:
    """A small pseudo-gradient, its canonical hash and safetensors bytes."""
    gen = torch.Generator().manual_seed(seed)
    sd = {
        "layer.weight": torch.randn(8, 8, generator=gen) * scale,
        "layer.bias": torch.randn(8, generator=gen) * scale,
    }
    return "0x" + hash_state_dict(sd).hex(), encode_blob(sd), sd
