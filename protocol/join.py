"""`RoundJoin`: the EIP-712 struct a node signs to join round ``round`` of run ``runId``.

A round's members are the nodes whose signed join the ledger recorded before the round started
(docs/ledger.md, "Membership"); an attestation from anyone else is refused. Declared once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.eip712_struct import Eip712Struct, StructSpec
from protocol.types import Address, RoundNumber, RunId

JOIN_PRIMARY_TYPE: Final = "RoundJoin"
JOIN_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("run_id", "runId", "bytes32"),
    ("round", "round", "uint64"),
    ("node", "node", "address"),
)
JOIN_SPEC: Final = StructSpec(JOIN_PRIMARY_TYPE, JOIN_FIELDS, what="join")
JOIN_TYPE: Final = JOIN_SPEC.type_string
JOIN_TYPEHASH: Final = JOIN_SPEC.typehash


@dataclass(frozen=True, slots=True)
class RoundJoin(Eip712Struct):
    """A node's signed request to be a member of one round of one run."""

    SPEC: ClassVar[StructSpec] = JOIN_SPEC

    run_id: RunId
    round: RoundNumber
    node: Address
