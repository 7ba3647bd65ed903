"""`ComputeAttestation`: the EIP-712 struct every node signs once per outer round.

Declared once, here. Its Solidity twin is ``ContributionLedger.ATTESTATION_TYPEHASH``; the
golden vectors in ``tests/vectors/compute_attestation.json`` prove both hash it the same way.

Python attributes are snake_case; the wire form (ledger API, typed data ``message``) is
camelCase with bytes32 as 0x-hex and integers as JSON numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final

from protocol.eip712 import (
    EIP712_DOMAIN_FIELDS,
    Eip712Domain,
    bytes32_hex,
    check_address,
    check_bytes32,
    check_uint,
    encode_address,
    encode_uint,
    keccak256,
    parse_bytes32,
    parse_uint,
    typed_data_digest,
    wallet_int,
)
from protocol.errors import EncodingError
from protocol.types import Address, Bytes32, RoundNumber, RunId

PRIMARY_TYPE: Final = "ComputeAttestation"

# (python attribute, EIP-712 name, solidity type) in struct order. The one declaration.
ATTESTATION_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("run_id", "runId", "bytes32"),
    ("round", "round", "uint64"),
    ("node", "node", "address"),
    ("config_version", "configVersion", "uint64"),
    ("base_checkpoint", "baseCheckpoint", "bytes32"),
    ("pseudo_gradient", "pseudoGradient", "bytes32"),
    ("data_shard", "dataShard", "bytes32"),
    ("inner_steps", "innerSteps", "uint32"),
    ("tokens", "tokens", "uint64"),
    ("result_checkpoint", "resultCheckpoint", "bytes32"),
)

ATTESTATION_TYPE: Final = (
    PRIMARY_TYPE + "(" + ",".join(f"{sol} {name}" for _, name, sol in ATTESTATION_FIELDS) + ")"
)
ATTESTATION_TYPEHASH: Final = keccak256(ATTESTATION_TYPE.encode())


@dataclass(frozen=True, slots=True)
class ComputeAttestation:
    """One node's signed claim of the work it did in one outer round (see docs/interfaces.md)."""

    run_id: RunId
    round: RoundNumber
    node: Address
    config_version: int
    base_checkpoint: Bytes32
    pseudo_gradient: Bytes32
    data_shard: Bytes32
    inner_steps: int
    tokens: int
    result_checkpoint: Bytes32

    _JSON_NAMES: ClassVar[tuple[str, ...]] = tuple(name for _, name, _ in ATTESTATION_FIELDS)

    def __post_init__(self) -> None:
        for attr, name, sol in ATTESTATION_FIELDS:
            value = getattr(self, attr)
            if sol == "bytes32":
                check_bytes32(name, value)
            elif sol == "address":
                check_address(name, value)
            else:
                check_uint(name, value, int(sol.removeprefix("uint")))

    # --- hashing ------------------------------------------------------------------------------

    def struct_hash(self) -> bytes:
        """EIP-712 ``hashStruct``: keccak of the typehash and the ten 32-byte words."""
        return keccak256(
            b"".join(
                (
                    ATTESTATION_TYPEHASH,
                    self.run_id,
                    encode_uint(self.round),
                    encode_address(self.node),
                    encode_uint(self.config_version),
                    self.base_checkpoint,
                    self.pseudo_gradient,
                    self.data_shard,
                    encode_uint(self.inner_steps),
                    encode_uint(self.tokens),
                    self.result_checkpoint,
                )
            )
        )

    def digest(self, domain: Eip712Domain) -> bytes:
        """The 32-byte EIP-712 digest that is signed (= ``ContributionLedger.hashAttestation``)."""
        return typed_data_digest(domain, self.struct_hash())

    # --- wire forms ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """camelCase object: bytes32 as 0x-hex, address checksummed, integers as numbers up to
        2^53 - 1 and as decimal strings above (JavaScript's JSON.parse reads both exactly)."""
        out: dict[str, Any] = {}
        for attr, name, sol in ATTESTATION_FIELDS:
            value = getattr(self, attr)
            if sol == "bytes32":
                out[name] = bytes32_hex(value)
            elif sol.startswith("uint"):
                out[name] = wallet_int(value)
            else:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, data: object) -> ComputeAttestation:
        """Parse the camelCase wire form strictly: exact keys, exact types, no coercion."""
        if not isinstance(data, dict):
            raise EncodingError(f"attestation: expected an object, got {type(data).__name__}")
        missing = [n for n in cls._JSON_NAMES if n not in data]
        unknown = sorted(set(data) - set(cls._JSON_NAMES))
        if missing or unknown:
            raise EncodingError(
                f"attestation: missing fields {missing}, unknown fields {unknown}; "
                f"expected exactly {list(cls._JSON_NAMES)}",
                code="invalid_field",
            )
        kwargs: dict[str, Any] = {}
        for attr, name, sol in ATTESTATION_FIELDS:
            value = data[name]
            if sol == "bytes32":
                kwargs[attr] = parse_bytes32(name, value)
            elif sol.startswith("uint"):
                kwargs[attr] = parse_uint(name, value, int(sol.removeprefix("uint")))
            else:
                kwargs[attr] = value
        return cls(**kwargs)

    def typed_data(self, domain: Eip712Domain) -> dict[str, Any]:
        """The full eth_signTypedData_v4 JSON (``EIP712Domain`` included in ``types``)."""
        return {
            "types": {
                "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_DOMAIN_FIELDS],
                PRIMARY_TYPE: [{"name": n, "type": t} for _, n, t in ATTESTATION_FIELDS],
            },
            "primaryType": PRIMARY_TYPE,
            "domain": domain.to_json(),
            "message": self.to_json(),
        }

    @classmethod
    def from_typed_data(cls, data: object) -> tuple[ComputeAttestation, Eip712Domain]:
        """Parse eth_signTypedData_v4 JSON; types, primaryType and domain must be coloco's."""
        if not isinstance(data, dict):
            raise EncodingError(f"typed data: expected an object, got {type(data).__name__}")
        expected_keys = {"types", "primaryType", "domain", "message"}
        if set(data) != expected_keys:
            raise EncodingError(
                f"typed data: expected exactly the keys {sorted(expected_keys)}, got {sorted(data)}"
            )
        if data["primaryType"] != PRIMARY_TYPE:
            raise EncodingError(
                f"typed data.primaryType: expected {PRIMARY_TYPE!r}, got {data['primaryType']!r}"
            )
        expected_types = {
            "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_DOMAIN_FIELDS],
            PRIMARY_TYPE: [{"name": n, "type": t} for _, n, t in ATTESTATION_FIELDS],
        }
        if data["types"] != expected_types:
            raise EncodingError(
                f"typed data.types: must declare exactly EIP712Domain and {ATTESTATION_TYPE}"
            )
        domain = Eip712Domain.from_json(data["domain"])
        return cls.from_json(data["message"]), domain

    def replace(self, **changes: Any) -> ComputeAttestation:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ComputeAttestation(**values)
