"""Fixtures of the protocol tests: a sample attestation, its domain and its signing key."""

from __future__ import annotations

import pytest

from protocol.attestation import ComputeAttestation
from protocol.eip712 import Eip712Domain
from protocol.signing import address_of_private_key
from protocol.types import Address, Bytes32, RoundNumber, RunId
from tests.vectors.generate import vector_address, vector_bytes32, vector_key

KEY = vector_key("pytest/node")


@pytest.fixture
def key() -> bytes:
    return KEY


@pytest.fixture
def domain() -> Eip712Domain:
    return Eip712Domain(chain_id=31337, verifying_contract=vector_address("pytest/ledger"))


def make_attestation(node: Address | None = None, **changes: object) -> ComputeAttestation:
    values: dict[str, object] = {
        "run_id": RunId(vector_bytes32("pytest/run")),
        "round": RoundNumber(3),
        "node": node or address_of_private_key(KEY),
        "config_version": 2,
        "base_checkpoint": Bytes32(vector_bytes32("pytest/base")),
        "pseudo_gradient": Bytes32(vector_bytes32("pytest/pg")),
        "data_shard": Bytes32(vector_bytes32("pytest/shard")),
        "inner_steps": 50,
        "tokens": 50 * 4 * 128,
        "result_checkpoint": Bytes32(vector_bytes32("pytest/result")),
        "trace_root": Bytes32(vector_bytes32("pytest/trace")),
    }
    values.update(changes)
    return ComputeAttestation(**values)  # type: ignore[arg-type]


@pytest.fixture
def attestation() -> ComputeAttestation:
    return make_attestation()
