"""StructSpec's packed hashStruct and from_json's single validation agree with the generic
forms (every signed struct; the hashes are also checked against Solidity elsewhere)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from protocol.attestation import ComputeAttestation
from protocol.eip712 import keccak256
from protocol.eip712_struct import StructSpec
from protocol.errors import EncodingError


def _generic_hash(spec: StructSpec, obj: object) -> bytes:
    words = [spec.typehash]
    for (attr, _, _), (_, encode, _) in zip(spec.fields, spec._codecs, strict=True):
        words.append(encode(getattr(obj, attr)))
    return keccak256(b"".join(words))


WIRE = {
    "runId": "0x" + "11" * 32, "round": 3, "node": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
    "configVersion": 2**64 - 1, "baseCheckpoint": "0x" + "22" * 32,
    "pseudoGradient": "0x" + "33" * 32, "dataShard": "0x" + "44" * 32, "innerSteps": 50,
    "tokens": "18446744073709551615", "resultCheckpoint": "0x" + "55" * 32,
    "traceRoot": "0x" + "66" * 32,
}  # fmt: skip


def test_generated_hash_and_trusted_construction_match_the_generic_forms() -> None:
    fast = ComputeAttestation.from_json(WIRE)
    slow = ComputeAttestation(**ComputeAttestation.SPEC.parse_json(WIRE))
    assert fast == slow and type(fast) is ComputeAttestation
    assert fast.struct_hash() == _generic_hash(ComputeAttestation.SPEC, fast)
    assert fast.replace(tokens=7).struct_hash() == _generic_hash(
        ComputeAttestation.SPEC, slow.replace(tokens=7)
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("round", -1), ("round", True), ("node", "0x5fbdb2315678afecb367f032d93f642f64180aa3"),
     ("runId", "0x11"), ("innerSteps", 2**32), ("tokens", 1.5)],
)  # fmt: skip
def test_from_json_still_refuses_every_bad_field(field: str, value: object) -> None:
    with pytest.raises(EncodingError):
        ComputeAttestation.from_json({**WIRE, field: value})


@pytest.mark.parametrize(
    "value",
    ["11" * 33, "0x" + "11" * 31 + "  ", "0x" + "11" * 31 + "\n1", "0x" + "1" * 63 + "g",
     "0x" + "11" * 32 + "\n", "0X" + "11" * 32, "0x" + "١" * 64, "0x" + "11" * 33, 11],
)  # fmt: skip
def test_bytes32_wants_exactly_64_hex_digits(value: object) -> None:
    """parse_bytes32 checks the form without a regex (66 characters, 0x, 32 bytes out of
    fromhex): whitespace, a trailing newline, other digits and other lengths are refused."""
    with pytest.raises(EncodingError, match="runId: expected a bytes32"):
        ComputeAttestation.from_json({**WIRE, "runId": value})


def test_the_unrolled_parser_names_missing_and_unknown_fields() -> None:
    missing = {k: v for k, v in WIRE.items() if k != "tokens"}
    with pytest.raises(EncodingError, match=r"missing fields \['tokens'\]"):
        ComputeAttestation.from_json(missing)
    with pytest.raises(EncodingError, match=r"unknown fields \['extra'\]"):
        ComputeAttestation.from_json({**missing, "extra": 1})


@pytest.mark.parametrize(
    ("sol", "value"),
    [("bytes32", b"\x07" * 32), ("address", "0x5FbDB2315678afecb367f032d93F642f64180aa3"),
     ("uint8", 255), ("uint64", 2**64 - 1), ("uint72", 2**64), ("uint256", 2**256 - 1)],
)  # fmt: skip
def test_the_packed_hash_and_the_parser_of_any_field_list_are_the_generic_ones(
    sol: str, value: object
) -> None:
    """Each field type alone (the getters' single-key case) and beside a uint64: the same words
    as its encoder, uints above 64 bits included; the wire form parses back."""
    for fields in ((("a", "a", sol),), (("a", "a", sol), ("b", "b", "uint64"))):
        spec = StructSpec("S", fields, what="s")
        obj = SimpleNamespace(a=value, b=2**64 - 1)
        spec.check(obj)
        assert spec.hash(obj) == _generic_hash(spec, obj)
        assert spec.parse_json(spec.to_json(obj)) == {k: getattr(obj, k) for k, _, _ in fields}
