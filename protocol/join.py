"""`RoundJoin`: the EIP-712 struct a node signs to join round ``round`` of run ``runId``.

A round's members are the nodes whose signed join the ledger recorded before the round started
(docs/ledger.md, "Membership"); an attestation from anyone else is refused. Declared once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from protocol.eip712 import (
    Eip712Domain,
    bytes32_hex,
    check_address,
    check_uint,
    encode_address,
    encode_uint,
    keccak256,
    parse_bytes32,
    typed_data_digest,
)
from protocol.errors import EncodingError
from protocol.types import Address, RoundNumber, RunId

JOIN_PRIMARY_TYPE: Final = "RoundJoin"
JOIN_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("run_id", "runId", "bytes32"),
    ("round", "round", "uint64"),
    ("node", "node", "address"),
)
JOIN_TYPE: Final = (
    JOIN_PRIMARY_TYPE + "(" + ",".join(f"{sol} {name}" for _, name, sol in JOIN_FIELDS) + ")"
)
JOIN_TYPEHASH: Final = keccak256(JOIN_TYPE.encode())


@dataclass(frozen=True, slots=True)
class RoundJoin:
    """A node's signed request to be a member of one round of one run."""

    run_id: RunId
    round: RoundNumber
    node: Address

    def __post_init__(self) -> None:
        check_address("node", self.node)
        check_uint("round", self.round, 64)

    def struct_hash(self) -> bytes:
        return keccak256(
            JOIN_TYPEHASH + self.run_id + encode_uint(self.round) + encode_address(self.node)
        )

    def digest(self, domain: Eip712Domain) -> bytes:
        return typed_data_digest(domain, self.struct_hash())

    def to_json(self) -> dict[str, Any]:
        return {"runId": bytes32_hex(self.run_id), "round": self.round, "node": self.node}

    @classmethod
    def from_json(cls, data: object) -> RoundJoin:
        if not isinstance(data, dict) or set(data) != {"runId", "round", "node"}:
            raise EncodingError(
                "join: expected exactly the fields runId, round, node", code="invalid_field"
            )
        return cls(
            run_id=RunId(parse_bytes32("runId", data["runId"])),
            round=RoundNumber(check_uint("round", data["round"], 64)),
            node=check_address("node", data["node"]),
        )
