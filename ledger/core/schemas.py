"""Request and response bodies of the HTTP API (strict: exact types, unknown fields refused)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    create_model,
)

from protocol.attestation import ATTESTATION_SPEC
from protocol.eip712_struct import StructSpec
from protocol.runs import NAME_MAX

Hex32 = Annotated[str, StringConstraints(pattern=r"^0x[0-9a-fA-F]{64}$")]
RunName = Annotated[
    str, StringConstraints(min_length=1, max_length=NAME_MAX, pattern=r"^(?:[^0]|0(?:[^x]|$))")
]
AddressStr = Annotated[str, StringConstraints(pattern=r"^0x[0-9a-fA-F]{40}$")]
SignatureHex = Annotated[str, StringConstraints(min_length=4, max_length=200)]


def _decimal(value: Any) -> Any:
    """A uint may come as its canonical decimal string (what ethers, viem and wallets send above
    2^53, and what the API's own responses carry there); anything else is checked as is."""
    if isinstance(value, str) and _DECIMAL.match(value):
        return int(value)
    return value


_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,77})$")
JS_SAFE_MAX = (1 << 53) - 1


def _wallet_int(bits: int) -> WithJsonSchema:
    """The OpenAPI type of a uint that can pass 2^53: an integer up to 2^53 - 1 or a decimal
    string, so that a JavaScript client generated from the schema reads `number | string`, never
    a rounded number. Responses carry the string above 2^53 - 1 (ledger.api.errors.WalletSafeJSON);
    requests may send either (a larger JSON integer is accepted too, but JavaScript cannot write
    one exactly)."""
    digits = len(str((1 << bits) - 1))
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": JS_SAFE_MAX},
                {"type": "string", "pattern": f"^(0|[1-9][0-9]{{0,{digits - 1}}})$"},
            ],
            "description": f"uint{bits}: an integer up to 2^53 - 1, else its decimal string",
        }
    )


Uint64 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 64), _wallet_int(64)]
Uint32 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 32)]
Uint256 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 256), _wallet_int(256)]
Uint64Out = Annotated[int, _wallet_int(64)]
"""A uint64 in a response body (round ids, token counts, node ids): integer or decimal string."""

_STRICT = ConfigDict(extra="forbid", strict=True)


_UINTS: dict[int, Any] = {32: Uint32, 64: Uint64, 256: Uint256}


def wire_type(sol: str) -> Any:
    """The request type of a signed field of Solidity type ``sol``: a bytes32 as 0x + 64 hex
    digits, an address as 0x + 40, a uintN as an integer in range or its decimal string."""
    if sol == "bytes32":
        return Hex32
    if sol == "address":
        return AddressStr
    bits = int(sol.removeprefix("uint") or "256") if sol.startswith("uint") else 0
    if bits not in _UINTS:
        raise TypeError(f"no request type for the Solidity type {sol!r}: add one to _UINTS")
    return _UINTS[bits]


class WireStruct(BaseModel):
    """A signed struct in its camelCase wire form: one field per field of its
    :class:`~protocol.eip712_struct.StructSpec`, named (EIP-712 names) and typed
    (:func:`wire_type`) from it by :func:`wire_model`. Strict: exact types, unknown fields
    refused; the protocol's parser checks them again (``ledger.intake.verify.check_form``)."""

    model_config = _STRICT

    if TYPE_CHECKING:  # the fields come from the spec: the type checker reads them by name

        def __getattr__(self, name: str) -> Any: ...


def wire_model(name: str, spec: StructSpec, doc: str) -> type[WireStruct]:
    """The request model of ``spec``'s struct: its fields in struct order."""
    fields: dict[str, Any] = {n: (wire_type(sol), ...) for _, n, sol in spec.fields}
    return create_model(name, __base__=WireStruct, __doc__=doc, __module__=__name__, **fields)


if TYPE_CHECKING:
    AttestationFields = WireStruct
else:
    AttestationFields = wire_model(
        "AttestationFields",
        ATTESTATION_SPEC,
        "The ComputeAttestation in its camelCase wire form (docs/interfaces.md).",
    )


class DomainIn(BaseModel):
    """Optional: the domain the node signed under, so a wrong chain/contract gets a clear error."""

    model_config = _STRICT

    chainId: Uint256  # noqa: N815
    verifyingContract: AddressStr  # noqa: N815


CommitWire = Annotated[str, StringConstraints(max_length=2048)]
"""One signed COMMIT in wire form (about 600 bytes)."""


class AttestationIn(BaseModel):
    """POST /v1/attestations body."""

    model_config = _STRICT

    attestation: AttestationFields
    signature: SignatureHex
    round_members: list[AddressStr] | None = Field(default=None, max_length=10_000)
    input_commits: list[CommitWire] | None = Field(default=None, max_length=10_000)
    """The members' signed ``COMMIT`` messages (protocol.coordination wire form) of the packets
    this node averaged: evidence against a member that attests another packet."""
    domain: DomainIn | None = None


class BatchIn(BaseModel):
    model_config = _STRICT

    items: list[AttestationIn] = Field(min_length=1)


class Accepted(BaseModel):
    id: int
    status: Literal["accepted"] = "accepted"


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


class BatchItemResult(BaseModel):
    index: int
    status: Literal["accepted", "rejected"]
    id: int | None = None
    error: ErrorBody | None = None
    http_status: int


class BatchOut(BaseModel):
    accepted: int
    rejected: int
    results: list[BatchItemResult]


class RunIn(BaseModel):
    model_config = _STRICT

    run_id: Hex32
    genesis_checkpoint: Hex32
    name: RunName | None = None
    """The name the run's id is the sha256 of (`coloco run open demo`), for the dashboard."""


class RunCloseIn(BaseModel):
    """POST /v1/runs/{run}/close: the final round (default: the highest round seen so far)."""

    model_config = _STRICT

    final_round: Uint64 | None = None


class RunInfo(BaseModel):
    """GET /v1/runs/{run} and the close's answer: committed on chain so far, closed or not."""

    run_id: str
    genesis_checkpoint: str | None
    last_committed: Uint64Out | None
    closed: bool
    final_round: Uint64Out | None


class RunOut(BaseModel):
    run_id: str
    genesis_checkpoint: str
    committed: bool
    tx_hash: str | None


class LiveOut(BaseModel):
    status: Literal["alive"]


class HealthOut(BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    chain_head: int | None
    indexed_block: int | None
    indexer_lag: int | None
    detail: dict[str, Any] = {}


class NodeOut(BaseModel):
    address: str
    node_id: Uint64Out | None = None  # StakeManager's stable id: the same across key rotations
    keys: list[str] = []  # every key of this node (rotated-away ones too): rounds cover them all
    registered: bool
    operator: str | None
    payout: str | None
    staked: str
    unbonding: str
    active: bool
    rounds_worked: int
    rounds: list[dict[str, Any]]
    rejections: list[dict[str, Any]]


class Receipt(BaseModel):
    run_id: str
    round: Uint64Out
    node: str
    claimed_tokens: Uint64Out
    verified_tokens: Uint64Out | None
    quality: float | None
    reward: str
    verified: bool | None
    reason: str | None
    round_state: str
    root_state: str | None = None  # the round's committed root: pending, finalized, revoked
    claimable_at: int | None = None  # unix seconds its dispute window ends (None: not committed)


class RewardsOut(BaseModel):
    account: str
    cumulative_amount: str
    proof: list[str]
    root: str | None
    root_committed: bool
    root_state: str = "unknown"  # pending (dispute window), finalized (claimable), revoked
    claimable_at: int | None = None  # unix seconds from which the proof's root pays

    receipts: list[Receipt]
    other_kinds: dict[str, Any] | None = None  # code, capital, ETH for compute (receipts.py)


class BlobOut(BaseModel):
    hash: str
    size: int
