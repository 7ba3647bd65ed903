"""Regenerate the golden vectors deterministically: `python -m tests.vectors.generate`.

`--check` compares instead of writing (exit 1 on a difference). The private keys are derived
from fixed labels and are TEST KEYS ONLY: never fund them.

Signatures come from eth-account (the reference implementation); the Python tests check that
the fast path agrees on every case, and the contracts' tests check Solidity agrees.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.messages import _hash_eip191_message, encode_typed_data
from eth_utils import to_checksum_address

from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain, keccak256
from protocol.merkle import RewardsTree
from protocol.node_key_proof import NodeKeyProof
from protocol.offer import ComputeOffer, label_bytes32
from protocol.types import Address, Bytes32, RoundNumber, RunId

VECTORS_DIR = Path(__file__).resolve().parent
ATTESTATION_FILE = VECTORS_DIR / "compute_attestation.json"
REWARDS_FILE = VECTORS_DIR / "rewards_tree.json"
NODE_KEY_PROOF_FILE = VECTORS_DIR / "node_key_proof.json"
OFFER_FILE = VECTORS_DIR / "compute_offer.json"

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
U256_MAX = 2**256 - 1

# anvil's first two CREATE addresses of its account 0 (nonce 0 and 1), and other chains' ids.
ANVIL_CREATE_0 = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
ANVIL_CREATE_1 = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"

log = logging.getLogger(__name__)


def vector_key(label: str) -> bytes:
    """A deterministic test-only private key."""
    return keccak256(b"coloco test key: " + label.encode())


def vector_bytes32(label: str) -> Bytes32:
    return Bytes32(keccak256(b"coloco test bytes32: " + label.encode()))


def vector_address(label: str) -> Address:
    return Address(to_checksum_address(keccak256(b"coloco test address: " + label.encode())[12:]))


def _case(label: str, chain_id: int, contract: str, **fields: Any) -> dict[str, Any]:
    key = vector_key(label)
    signer = Account.from_key(key).address
    values: dict[str, Any] = {
        "run_id": vector_bytes32(label + "/run"),
        "round": RoundNumber(1),
        "node": signer,
        "config_version": 1,
        "base_checkpoint": vector_bytes32(label + "/base"),
        "pseudo_gradient": vector_bytes32(label + "/pg"),
        "data_shard": vector_bytes32(label + "/shard"),
        "inner_steps": 500,
        "tokens": 500 * 8 * 256,
        "result_checkpoint": vector_bytes32(label + "/result"),
        "trace_root": vector_bytes32(label + "/trace"),
    }
    values.update(fields)
    attestation = ComputeAttestation(**values)
    domain = Eip712Domain(chain_id=chain_id, verifying_contract=Address(contract))
    typed = attestation.typed_data(domain)
    message = encode_typed_data(full_message=typed)
    digest = _hash_eip191_message(message)
    signed = Account.sign_message(message, key)
    return {
        "name": label,
        "typed_data": typed,
        "struct_hash": "0x" + attestation.struct_hash().hex(),
        "domain_separator": "0x" + domain.separator.hex(),
        "digest": "0x" + digest.hex(),
        "private_key": "0x" + key.hex(),
        "signature": "0x" + bytes(signed.signature).hex(),
        "signer": signer,
    }


def attestation_cases() -> list[dict[str, Any]]:
    zero = Bytes32(bytes(32))
    ones = Bytes32(b"\xff" * 32)
    return [
        _case(
            "all-zero",
            1,
            vector_address("contract/mainnet"),
            run_id=RunId(zero),
            round=RoundNumber(0),
            config_version=0,
            base_checkpoint=zero,
            pseudo_gradient=zero,
            data_shard=zero,
            inner_steps=0,
            tokens=0,
            result_checkpoint=zero,
            trace_root=zero,
        ),
        _case(
            "all-max",
            1,
            vector_address("contract/mainnet"),
            run_id=RunId(ones),
            round=RoundNumber(U64_MAX),
            config_version=U64_MAX,
            base_checkpoint=ones,
            pseudo_gradient=ones,
            data_shard=ones,
            inner_steps=U32_MAX,
            tokens=U64_MAX,
            result_checkpoint=ones,
            trace_root=ones,
        ),
        _case("anvil-first-contract", 31337, ANVIL_CREATE_0),
        _case("anvil-second-contract", 31337, ANVIL_CREATE_1, round=RoundNumber(7)),
        _case("anvil-round-2", 31337, ANVIL_CREATE_0, round=RoundNumber(2), config_version=3),
        _case(
            "high-bits",
            8453,
            vector_address("contract/base"),
            round=RoundNumber(2**63),
            config_version=2**32,
            inner_steps=2**31,
            tokens=2**63 + 1,
        ),
        _case("sepolia", 11155111, vector_address("contract/sepolia"), round=RoundNumber(42)),
        _case(
            "large-chain-id",
            U64_MAX,
            vector_address("contract/large"),
            round=RoundNumber(1),
            inner_steps=1,
            tokens=1,
        ),
        _case("optimism", 10, vector_address("contract/optimism"), config_version=17),
        _case("same-fields-other-contract", 1, vector_address("contract/other")),
    ]


def _proof_case(label: str, chain_id: int, contract: str, **fields: Any) -> dict[str, Any]:
    """A node key's NodeKeyProof (StakeManager.register / rotateNodeKey), signed by eth-account."""
    key = vector_key("node-key/" + label)
    values: dict[str, Any] = {
        "operator": vector_address(label + "/operator"),
        "payout": vector_address(label + "/payout"),
        "nonce": 0,
        "deadline": 1_700_003_600,
    }
    values.update(fields)
    proof = NodeKeyProof(**values)
    domain = Eip712Domain(chain_id=chain_id, verifying_contract=Address(contract))
    typed = proof.typed_data(domain)
    message = encode_typed_data(full_message=typed)
    signed = Account.sign_message(message, key)
    return {
        "name": label,
        "typed_data": typed,
        "struct_hash": "0x" + proof.struct_hash().hex(),
        "digest": "0x" + _hash_eip191_message(message).hex(),
        "private_key": "0x" + key.hex(),
        "signature": "0x" + bytes(signed.signature).hex(),
        "signer": Account.from_key(key).address,
    }


def node_key_proof_cases() -> list[dict[str, Any]]:
    return [
        _proof_case("anvil", 31337, ANVIL_CREATE_0),
        _proof_case("anvil-other-contract", 31337, ANVIL_CREATE_1, nonce=1),
        _proof_case(
            "mainnet-max", 1, vector_address("contract/mainnet"), nonce=U256_MAX, deadline=U256_MAX
        ),
        _proof_case("base-zero", 8453, vector_address("contract/base"), deadline=0),
    ]


def _offer_case(label: str, chain_id: int, contract: str, **fields: Any) -> dict[str, Any]:
    """A node's ComputeOffer (the compute market, protocol/offer.py), signed by eth-account."""
    key = vector_key("offer/" + label)
    values: dict[str, Any] = {
        "node": Account.from_key(key).address,
        "device_kind": label_bytes32("nvidia-h200"),
        "device_count": 8,
        "memory_bytes": 141 * 2**30,
        "flops": 60 * 10**12,
        "bandwidth": 10 * 10**9,
        "region": label_bytes32("eu-west"),
        "price_per_device_hour": 2 * 10**15,
        "min_hours": 1,
        "expiry": 1_800_000_000,
        "nonce": 1,
        "challenge": vector_bytes32(label + "/challenge"),
    }
    values.update(fields)
    offer = ComputeOffer(**values)
    domain = Eip712Domain(chain_id=chain_id, verifying_contract=Address(contract))
    typed = offer.typed_data(domain)
    message = encode_typed_data(full_message=typed)
    signed = Account.sign_message(message, key)
    return {
        "name": label,
        "typed_data": typed,
        "struct_hash": "0x" + offer.struct_hash().hex(),
        "digest": "0x" + _hash_eip191_message(message).hex(),
        "private_key": "0x" + key.hex(),
        "signature": "0x" + bytes(signed.signature).hex(),
        "signer": Account.from_key(key).address,
    }


def offer_cases() -> list[dict[str, Any]]:
    zero = Bytes32(bytes(32))
    ones = Bytes32(b"\xff" * 32)
    return [
        _offer_case("anvil", 31337, ANVIL_CREATE_0),
        _offer_case(
            "anvil-unverified-cpu",
            31337,
            ANVIL_CREATE_1,
            device_kind=label_bytes32("cpu"),
            device_count=1,
            memory_bytes=8 * 2**30,
            flops=10**11,
            challenge=zero,
        ),
        _offer_case(
            "all-max",
            1,
            vector_address("contract/mainnet"),
            device_kind=ones,
            device_count=U32_MAX,
            memory_bytes=U64_MAX,
            flops=U64_MAX,
            bandwidth=U64_MAX,
            region=ones,
            price_per_device_hour=U256_MAX,
            min_hours=U32_MAX,
            expiry=U64_MAX,
            nonce=U64_MAX,
            challenge=ones,
        ),
        _offer_case(
            "all-zero",
            8453,
            vector_address("contract/base"),
            device_kind=zero,
            device_count=0,
            memory_bytes=0,
            flops=0,
            bandwidth=0,
            region=zero,
            price_per_device_hour=0,
            min_hours=0,
            expiry=0,
            nonce=0,
            challenge=zero,
        ),
    ]


def rewards_trees() -> list[dict[str, Any]]:
    def accounts(prefix: str, n: int) -> list[Address]:
        return [vector_address(f"{prefix}/{i}") for i in range(n)]

    big = [(acct, (i * 7919 + 1) * 10**15) for i, acct in enumerate(accounts("payout/big", 130))]
    big[0] = (big[0][0], 0)
    big[1] = (big[1][0], U256_MAX)
    trees = [
        [(vector_address("payout/single"), 10**18)],
        [(a, (i + 1) * 25 * 10**17) for i, a in enumerate(accounts("payout/pair", 2))],
        [(a, i + 1) for i, a in enumerate(accounts("payout/three", 3))],
        big,
    ]
    return [RewardsTree.build(values).to_json() for values in trees]


def render(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    outputs = {
        ATTESTATION_FILE: render(attestation_cases()),
        REWARDS_FILE: render(rewards_trees()),
        NODE_KEY_PROOF_FILE: render(node_key_proof_cases()),
        OFFER_FILE: render(offer_cases()),
    }
    stale = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for path in stale:
            log.error("%s is stale: run python -m tests.vectors.generate", path)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
