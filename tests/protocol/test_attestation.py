"""ComputeAttestation: one declaration, strict wire forms, digests equal to eth-account's."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from eth_account.messages import _hash_eip191_message, encode_typed_data
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.attestation import ATTESTATION_TYPE, ATTESTATION_TYPEHASH, ComputeAttestation
from protocol.eip712 import Eip712Domain, keccak256
from protocol.errors import EncodingError
from tests.protocol.conftest import make_attestation
from tests.vectors.generate import vector_address

REPO = Path(__file__).resolve().parents[2]


def test_type_string_matches_interfaces_doc_and_solidity() -> None:
    doc = (REPO / "docs" / "interfaces.md").read_text()
    assert ATTESTATION_TYPE in doc
    solidity = (REPO / "contracts" / "src" / "ContributionLedger.sol").read_text()
    pieces = re.search(r"ATTESTATION_TYPEHASH = keccak256\((.*?)\);", solidity, re.S)
    assert pieces is not None
    assert "".join(re.findall(r'"([^"]*)"', pieces.group(1))) == ATTESTATION_TYPE
    assert keccak256(ATTESTATION_TYPE.encode()) == ATTESTATION_TYPEHASH


def test_json_round_trip(attestation: ComputeAttestation) -> None:
    wire = attestation.to_json()
    assert list(wire) == [
        "runId", "round", "node", "configVersion", "baseCheckpoint", "pseudoGradient",
        "dataShard", "innerSteps", "tokens", "resultCheckpoint", "traceRoot",
    ]  # fmt: skip
    assert wire["runId"] == "0x" + attestation.run_id.hex()
    assert ComputeAttestation.from_json(wire) == attestation


def test_typed_data_round_trip(attestation: ComputeAttestation, domain: Eip712Domain) -> None:
    typed = attestation.typed_data(domain)
    assert typed["primaryType"] == "ComputeAttestation"
    assert [f["name"] for f in typed["types"]["EIP712Domain"]] == [
        "name", "version", "chainId", "verifyingContract",
    ]  # fmt: skip
    parsed, parsed_domain = ComputeAttestation.from_typed_data(typed)
    assert parsed == attestation
    assert parsed_domain == domain


uint64 = st.integers(0, 2**64 - 1)
b32 = st.binary(min_size=32, max_size=32)


@settings(max_examples=60, deadline=None)
@given(
    run_id=b32, round_=uint64, config_version=uint64, base=b32, pg=b32, shard=b32,
    inner=st.integers(0, 2**32 - 1), tokens=uint64, result=b32,
    chain_id=st.integers(1, 2**256 - 1), contract_seed=st.integers(0, 10**6),
)  # fmt: skip
def test_digest_equals_eth_account_reference(
    run_id: bytes, round_: int, config_version: int, base: bytes, pg: bytes, shard: bytes,
    inner: int, tokens: int, result: bytes, chain_id: int, contract_seed: int,
) -> None:  # fmt: skip
    att = make_attestation(
        run_id=run_id, round=round_, config_version=config_version, base_checkpoint=base,
        pseudo_gradient=pg, data_shard=shard, inner_steps=inner, tokens=tokens,
        result_checkpoint=result, trace_root=result,
    )  # fmt: skip
    domain = Eip712Domain(chain_id, vector_address(f"hypothesis/{contract_seed}"))
    reference = _hash_eip191_message(encode_typed_data(full_message=att.typed_data(domain)))
    assert att.digest(domain) == reference


def test_every_field_changes_the_digest(
    attestation: ComputeAttestation, domain: Eip712Domain
) -> None:
    changes: dict[str, Any] = {
        "run_id": b"\x01" * 32, "round": 4, "node": vector_address("other"),
        "config_version": 3, "base_checkpoint": b"\x02" * 32, "pseudo_gradient": b"\x03" * 32,
        "data_shard": b"\x04" * 32, "inner_steps": 51, "tokens": 1,
        "result_checkpoint": b"\x05" * 32, "trace_root": b"\x06" * 32,
    }  # fmt: skip
    digests = {attestation.digest(domain)}
    for name, value in changes.items():
        digests.add(attestation.replace(**{name: value}).digest(domain))
    digests.add(attestation.digest(Eip712Domain(1, domain.verifying_contract)))
    digests.add(attestation.digest(Eip712Domain(31337, vector_address("other-ledger"))))
    assert len(digests) == len(changes) + 3


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("round", True, "round: expected an integer"),
        ("round", 1.0, "round: expected an integer"),
        ("round", "01", "round: expected an integer or its decimal string"),
        ("round", " 1", "round: expected an integer or its decimal string"),
        ("round", "0x1", "round: expected an integer or its decimal string"),
        ("round", "1e3", "round: expected an integer or its decimal string"),
        ("round", "-1", "round: expected an integer or its decimal string"),
        ("tokens", str(2**64), "out of range for uint64"),
        ("round", -1, "round: -1 is out of range for uint64"),
        ("round", 2**64, "out of range for uint64"),
        ("innerSteps", 2**32, "innerSteps: 4294967296 is out of range for uint32"),
        ("tokens", None, "tokens: expected an integer"),
        ("configVersion", False, "configVersion: expected an integer"),
        ("node", "0x" + "ab" * 20, "node: .* is not EIP-55 checksummed"),
        ("node", "0x" + "ab" * 19, "node: expected a 0x-prefixed 20-byte"),
        ("node", "ab" * 20, "node: expected a 0x-prefixed 20-byte"),
        ("node", 123, "node: expected a 0x-prefixed"),
        ("runId", "0x" + "00" * 31, r"runId: expected a bytes32 .* \(31 bytes\)"),
        ("runId", "0x" + "00" * 33, "runId: expected a bytes32"),
        ("baseCheckpoint", "0x" + "zz" * 32, "baseCheckpoint: expected a bytes32"),
        ("dataShard", "00" * 32, "dataShard: expected a bytes32"),
        ("resultCheckpoint", 0, "resultCheckpoint: expected a bytes32"),
        ("traceRoot", "0x" + "00" * 31, "traceRoot: expected a bytes32"),
    ],
)
def test_from_json_rejects_bad_fields(
    attestation: ComputeAttestation, field: str, value: object, match: str
) -> None:
    wire = attestation.to_json()
    wire[field] = value
    with pytest.raises(EncodingError, match=match):
        ComputeAttestation.from_json(wire)


def test_from_json_rejects_missing_and_unknown_keys(attestation: ComputeAttestation) -> None:
    wire = attestation.to_json()
    del wire["tokens"]
    with pytest.raises(EncodingError, match=r"missing fields \['tokens'\]"):
        ComputeAttestation.from_json(wire)
    wire = attestation.to_json() | {"salt": 1}
    with pytest.raises(EncodingError, match=r"unknown fields \['salt'\]"):
        ComputeAttestation.from_json(wire)
    with pytest.raises(EncodingError, match="expected an object"):
        ComputeAttestation.from_json([1, 2])


def test_constructor_rejects_raw_wrong_types() -> None:
    with pytest.raises(EncodingError, match=r"run_id|runId"):
        make_attestation(run_id="0x" + "00" * 32)
    with pytest.raises(EncodingError, match="baseCheckpoint: expected exactly 32 bytes, got 31"):
        make_attestation(base_checkpoint=b"\x00" * 31)


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("primaryType",), "Other", "primaryType"),
        (("domain", "name"), "other", "expected name 'coloco'"),
        (("domain", "version"), "2", "version"),
        (("domain", "chainId"), "031337", r"domain.chainId: expected an integer"),
        (("domain", "chainId"), 0, "domain.chainId: must be non-zero"),
        (("domain", "verifyingContract"), "0x" + "cd" * 20, "domain.verifyingContract"),
        (("types", "ComputeAttestation", 1, "type"), "uint256", "typed data.types"),
        (("message", "round"), "3.0", "round: expected an integer"),
    ],
)
def test_from_typed_data_rejects_malformed(
    attestation: ComputeAttestation, domain: Eip712Domain, path: tuple[Any, ...], value: object,
    match: str,
) -> None:  # fmt: skip
    typed = copy.deepcopy(attestation.typed_data(domain))
    target: Any = typed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(EncodingError, match=match):
        ComputeAttestation.from_typed_data(typed)


def test_from_typed_data_rejects_extra_domain_field(
    attestation: ComputeAttestation, domain: Eip712Domain
) -> None:
    typed = attestation.typed_data(domain)
    typed["domain"]["salt"] = "0x" + "00" * 32
    with pytest.raises(EncodingError, match="domain: expected exactly the keys"):
        ComputeAttestation.from_typed_data(typed)
    with pytest.raises(EncodingError, match="typed data: expected exactly the keys"):
        ComputeAttestation.from_typed_data({"message": {}})


def test_wire_json_is_wallet_safe_and_reads_decimal_strings(
    attestation: ComputeAttestation, domain: Eip712Domain
) -> None:
    """Integers above 2^53 - 1 go out as decimal strings (JavaScript's JSON.parse would round
    them) and come back from the decimal strings ethers and viem send; small ones stay numbers."""
    big = attestation.replace(tokens=2**64 - 1, round=2**53)
    wire = big.to_json()
    assert wire["tokens"] == str(2**64 - 1) and wire["round"] == str(2**53)
    assert wire["innerSteps"] == big.inner_steps  # a small uint stays a JSON number
    again = ComputeAttestation.from_json(wire)
    assert again == big and again.digest(domain) == big.digest(domain)
    as_strings = {k: str(v) if isinstance(v, int) else v for k, v in attestation.to_json().items()}
    assert ComputeAttestation.from_json(as_strings) == attestation
