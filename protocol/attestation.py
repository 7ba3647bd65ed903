"""`ComputeAttestation`: the EIP-712 struct every node signs once per outer round.

Declared once, here. Its Solidity twin is ``ContributionLedger.ATTESTATION_TYPEHASH``; the
golden vectors in ``tests/vectors/compute_attestation.json`` prove both hash it the same way.

Python attributes are snake_case; the wire form (ledger API, typed data ``message``) is
camelCase with bytes32 as 0x-hex and integers as JSON numbers up to 2^53 - 1, decimal strings
above (wallet-safe).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final

from protocol.eip712_struct import Eip712Struct, StructSpec
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
    ("trace_root", "traceRoot", "bytes32"),
)
ATTESTATION_SPEC: Final = StructSpec(PRIMARY_TYPE, ATTESTATION_FIELDS, what="attestation")
ATTESTATION_ATTRS: Final = tuple(attr for attr, _, _ in ATTESTATION_FIELDS)
"""The Python attribute names in struct order: the ledger's columns and the judge's evidence."""
ATTESTATION_TYPE: Final = ATTESTATION_SPEC.type_string
ATTESTATION_TYPEHASH: Final = ATTESTATION_SPEC.typehash


@dataclass(frozen=True, slots=True)
class ComputeAttestation(Eip712Struct):
    """One node's signed claim of the work it did in one outer round (see docs/interfaces.md).

    Hashing, the digest (= ``ContributionLedger.hashAttestation``), the wire JSON and the typed
    data all come from ``ATTESTATION_SPEC`` (protocol/eip712_struct.py).
    """

    SPEC: ClassVar[StructSpec] = ATTESTATION_SPEC

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
    trace_root: Bytes32
    """Merkle root of the round's boundary states every traceInterval inner steps
    (reference/trace.py); the ledger asks for a boundary and checks it against this root."""

    def replace(self, **changes: Any) -> ComputeAttestation:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ComputeAttestation(**values)
