"""Request and response bodies of the HTTP API (strict: exact types, unknown fields refused)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
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
EIP55_FORMAT = "eip55-address"
"""The OpenAPI ``format`` of an address a signed struct carries: EIP-55 checksummed (a pattern
cannot say so; a client or a schema fuzzer that knows the format writes valid ones)."""
SignedAddress = Annotated[
    str,
    StringConstraints(pattern=r"^0x[0-9a-fA-F]{40}$"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^0x[0-9a-fA-F]{40}$",
            "format": EIP55_FORMAT,
            "description": "an address in its EIP-55 checksummed form (refused otherwise)",
        }
    ),
]


def _decimal(value: Any) -> Any:
    """A uint may come as its canonical decimal string (what ethers, viem and wallets send above
    2^53, and what the API's own responses carry there), or as a JSON number with no fraction
    (``1.0`` is JSON Schema's integer 1) up to 2^53 - 1: a larger number is exact in no
    JavaScript client nor in schema tools (RFC 8259, section 6), so it must come as its decimal
    string (the schema says the same). Anything else is checked as is."""
    if isinstance(value, str) and _DECIMAL.match(value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > JS_SAFE_MAX:
        raise ValueError(
            f"a JSON number above 2^53 - 1 is not exact in every client: send {value} as the "
            f'decimal string "{value}"'
        )
    return value


_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,77})$")
JS_SAFE_MAX = (1 << 53) - 1


def decimal_pattern(most: int, *, least: int = 0) -> str:
    """A regular expression matching exactly the canonical decimal strings of ``least``..``most``
    (``least`` 0 or 1): the schema's string form of a uint states the server's bounds, not only
    its digit count."""
    digits = str(most)
    shorter = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    same_length = []  # numbers of len(digits) digits below ``most``: a smaller digit at i
    for i, digit in enumerate(digits):
        low, high = (1 if i == 0 else 0), int(digit) - 1
        if high < low:
            continue
        rest = len(digits) - i - 1
        choice = str(low) if low == high else f"[{low}-{high}]"
        same_length.append(digits[:i] + choice + (f"[0-9]{{{rest}}}" if rest else ""))
    zero = ["0"] if least == 0 else []
    return "^(" + "|".join([*zero, *shorter, *same_length, digits]) + ")$"


def _uint_schema(bits: int, least: int = 0) -> WithJsonSchema:
    """The OpenAPI type of a request uint: an integer up to 2^53 - 1 (or the type's maximum if
    less), or its canonical decimal string up to the type's maximum: exactly what the server
    accepts (:func:`_decimal`). A JavaScript client generated from it reads `number | string`."""
    most = (1 << bits) - 1
    number = {"type": "integer", "minimum": least, "maximum": min(most, JS_SAFE_MAX)}
    string = {"type": "string", "pattern": decimal_pattern(most, least=least)}
    return WithJsonSchema(
        {
            "anyOf": [number, string],
            "description": (f"uint{bits}" if bits % 8 == 0 else f"below 2^{bits}")
            + ": an integer"
            + (", up to 2^53 - 1, else its decimal string" if most > JS_SAFE_MAX else "")
            + " (a decimal string is accepted at any size in range)",
        }
    )


def _wallet_int(bits: int) -> WithJsonSchema:
    """The OpenAPI type of a uint in a response: an integer up to 2^53 - 1 or a decimal string,
    so that a JavaScript client generated from the schema reads `number | string`, never a
    rounded number. Responses carry the string above 2^53 - 1 (ledger.api.errors.WalletSafeJSON)."""
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


Uint64 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 64), _uint_schema(64)]
Uint32 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 32), _uint_schema(32)]
Uint256 = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 256), _uint_schema(256)]
RoundIn = Annotated[int, BeforeValidator(_decimal), Field(ge=0, lt=1 << 63), _uint_schema(63)]
"""A round number the ledger looks up (a join's round): below 2^63, what its database stores and
what the round path parameters accept (a uint64 beyond it names no round)."""
Uint64Out = Annotated[int, _wallet_int(64)]
"""A uint64 in a response body (round ids, token counts, node ids): integer or decimal string."""

_STRICT = ConfigDict(extra="forbid", strict=True)


_UINTS: dict[int, Any] = {32: Uint32, 64: Uint64, 256: Uint256}
NARROWED: Final[dict[str, tuple[int, int | None]]] = {"innerSteps": (1, 32), "round": (0, 63)}
"""Signed uint fields the ledger takes in a narrower range than their Solidity type, as (least,
bits): no round has zero inner steps (TrainingConfig refuses H = 0, and a replay divides the
tokens by them); a round is below 2^63, what the database stores (and the round path parameters
accept)."""


def wire_type(sol: str, *, least: int = 0, bits: int | None = None) -> Any:
    """The request type of a signed field of Solidity type ``sol``: a bytes32 as 0x + 64 hex
    digits, an address as 0x + 40, a uintN as an integer in range or its decimal string (from
    ``least``, below 2^``bits`` if given)."""
    if sol == "bytes32":
        return Hex32
    if sol == "address":
        return SignedAddress
    size = int(sol.removeprefix("uint") or "256") if sol.startswith("uint") else 0
    if size not in _UINTS:
        raise TypeError(f"no request type for the Solidity type {sol!r}: add one to _UINTS")
    if least == 0 and bits is None:
        return _UINTS[size]
    bits = min(bits or size, size)
    return Annotated[
        int, BeforeValidator(_decimal), Field(ge=least, lt=1 << bits), _uint_schema(bits, least)
    ]


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
    fields: dict[str, Any] = {}
    for _, n, sol in spec.fields:
        least, bits = NARROWED.get(n, (0, None))
        fields[n] = (wire_type(sol, least=least, bits=bits), ...)
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
    round_members: list[SignedAddress] | None = Field(default=None, max_length=10_000)
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


def _not_zero(value: str) -> str:
    if int(value, 16) == 0:
        raise ValueError("must not be zero: the hash of the run's genesis checkpoint")
    return value


NonZeroHex32 = Annotated[
    str,
    StringConstraints(pattern=r"^0x[0-9a-fA-F]{64}$"),
    AfterValidator(_not_zero),
    WithJsonSchema(
        {"type": "string", "pattern": r"^0x[0-9a-fA-F]{64}$", "not": {"pattern": "^0x0{64}$"}}
    ),
]
"""A bytes32 other than zero (a checkpoint hash: zero names no checkpoint)."""


EXAMPLE_RUN = "0x" + "c0" * 32
"""A run id the schema's examples name (the examples phase of tests/ledger/test_schema.py)."""


class RunIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"run_id": EXAMPLE_RUN, "genesis_checkpoint": "0x" + "9e" * 32}]
        },
    )

    run_id: Hex32
    genesis_checkpoint: NonZeroHex32
    name: RunName | None = None
    """The name the run's id is the sha256 of (`coloco run open demo`), for the dashboard."""


class RunCloseIn(BaseModel):
    """POST /v1/runs/{run}/close: the final round (default: the highest round seen so far)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"final_round": 3}, {}]}
    )

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
    # rounds joined and closed without this node's attestation, newest first (run_id, round)
    missed_rounds: list[dict[str, Any]] = []


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
