"""`CoordinationMessage`: the one signed envelope of everything nodes tell each other.

Joins, closed member lists (round-open), leave notices, config read-outs and checkpoint hashes all
travel as a :class:`SignedMessage`: an EIP-712 struct over (run, round, attempt, kind, signer,
keccak256 of the payload) under the deployment's domain (the attestation's), signed by the node's
hot key. The domain binds a message to one chain and one ContributionLedger; the struct binds it to
one run, one round, one attempt of that round and one kind, so a message copied to another key,
round, attempt or kind does not verify there (replays do not count). The payload is canonical JSON
(sorted keys, no spaces), so its hash is reproducible.

A signed ``JOIN`` is also the membership record the ledger can keep: it proves the node asked to
train round ``round`` before the round opened.

Verifying a message here checks its form and its signature only; whether the signer may speak
(registered and active on chain) is the reader's check (trainer/network/coordination/).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Final

from protocol.eip712 import Eip712Domain, keccak256
from protocol.eip712_struct import Eip712Struct, StructSpec
from protocol.errors import EncodingError, SignatureError
from protocol.signing import check_signature, recover_digest, sign_digest
from protocol.types import Address, Bytes32, RunId

PRIMARY_TYPE: Final = "CoordinationMessage"

# (python attribute, EIP-712 name, solidity type) in struct order. The one declaration.
COORDINATION_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("run_id", "runId", "bytes32"),
    ("round", "round", "uint64"),
    ("attempt", "attempt", "uint32"),
    ("kind", "kind", "uint8"),
    ("node", "node", "address"),
    ("payload_hash", "payloadHash", "bytes32"),
)
COORDINATION_SPEC: Final = StructSpec(
    PRIMARY_TYPE, COORDINATION_FIELDS, what="coordination message"
)
COORDINATION_TYPE: Final = COORDINATION_SPEC.type_string
COORDINATION_TYPEHASH: Final = COORDINATION_SPEC.typehash
MAX_WIRE_BYTES: Final = 1 << 20
"""A message on the wire is at most 1 MiB (a round-open of ~1000 members fits)."""


class Kind(IntEnum):
    """What a message says. The number is what is signed."""

    JOIN = 1
    """I train round r (attempt a). Payload: ``head`` (my chain head), ``endpoint`` (where I
    would host the rendezvous as a successor, or "")."""
    ROUND_OPEN = 2
    """Round r (attempt a) is closed: its members (their signed joins) and the block at which
    every member reads TrainingConfig."""
    LEAVE = 3
    """Do not wait for me in round r."""
    CONFIG = 4
    """My read of TrainingConfig at the round's block (its hash), or that I sit the round out."""
    CHECKPOINT = 5
    """The weights hash I hold after round r (attempt a)."""
    HEARTBEAT = 6
    """I am alive (round r: the round I am in). Payload: ``seq``, a counter that only grows."""
    PACE = 7
    """My pace in round r: ``step_s``, my inner phase's seconds per step (trainer.round.timebox
    sets the next round's time box from the members' paces)."""
    COMMIT = 8
    """The packet I feed round r's all-reduce (attempt a): ``pseudoGradient``, its commitment
    hash (0x-hex), and ``tokens``, its weight: the values my attestation of round r signs.
    Posted before the exchange; every peer checks my packet and weight against it, and hands it
    to the ledger as evidence (trainer.round.commits)."""


_KINDS: Final = frozenset(int(k) for k in Kind)


def canonical_json(payload: dict[str, Any]) -> bytes:
    """Sorted keys, no spaces, UTF-8: one byte string per payload."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class CoordinationMessage(Eip712Struct):
    """The signed struct; ``payload_hash`` = keccak256 of the canonical payload bytes."""

    SPEC: ClassVar[StructSpec] = COORDINATION_SPEC

    run_id: RunId
    round: int
    attempt: int
    kind: Kind
    node: Address
    payload_hash: Bytes32

    def __post_init__(self) -> None:
        kind = self.kind
        if isinstance(kind, bool) or not isinstance(kind, int) or kind not in _KINDS:
            raise EncodingError(f"coordination message: unknown kind {kind!r}")
        object.__setattr__(self, "kind", Kind(kind))
        COORDINATION_SPEC.check(self)


@dataclass(frozen=True, slots=True)
class SignedMessage:
    """A message, its payload bytes and the 65-byte signature of its signer (``message.node``)."""

    message: CoordinationMessage
    payload: bytes
    signature: bytes

    @classmethod
    def create(
        cls,
        private_key: bytes,
        node: Address,
        domain: Eip712Domain,
        *,
        run_id: bytes,
        round: int,
        attempt: int,
        kind: Kind,
        payload: dict[str, Any],
    ) -> SignedMessage:
        """Sign ``payload`` as ``node`` (whose key is ``private_key``)."""
        body = canonical_json(payload)
        msg = CoordinationMessage(RunId(run_id), round, attempt, kind, node,
                                  Bytes32(keccak256(body)))  # fmt: skip
        return cls(msg, body, sign_digest(msg.digest(domain), private_key))

    def verify(self, domain: Eip712Domain) -> Address:
        """Return the signer after checking the payload hash and that ``message.node`` signed it."""
        if keccak256(self.payload) != self.message.payload_hash:
            raise SignatureError("coordination message: the payload does not hash to payloadHash")
        signer = recover_digest(self.message.digest(domain), self.signature)
        if signer != self.message.node:
            raise SignatureError(
                f"coordination message: signed by {signer}, not by {self.message.node}",
                code="signer_mismatch",
            )
        return signer

    def body(self) -> dict[str, Any]:
        """The payload as a JSON object."""
        try:
            data = json.loads(self.payload)
        except ValueError as exc:
            raise EncodingError(f"coordination payload: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise EncodingError("coordination payload: expected a JSON object")
        return data

    def to_wire(self) -> bytes:
        return canonical_json(
            {
                "message": self.message.to_json(),
                "payload": self.payload.decode(),
                "signature": "0x" + self.signature.hex(),
            }
        )

    @classmethod
    def from_wire(cls, data: bytes) -> SignedMessage:
        """Parse the wire form strictly (size, fields, types); EncodingError/SignatureError."""
        if len(data) > MAX_WIRE_BYTES:
            raise EncodingError(f"coordination message: {len(data)} bytes, over {MAX_WIRE_BYTES}")
        try:
            outer = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EncodingError(f"coordination message: not JSON ({exc})") from None
        if not isinstance(outer, dict) or sorted(outer) != ["message", "payload", "signature"]:
            raise EncodingError("coordination message: expected message, payload and signature")
        if not isinstance(outer["payload"], str):
            raise EncodingError("coordination message: payload must be a JSON string")
        return cls(
            CoordinationMessage.from_json(outer["message"]),
            outer["payload"].encode(),
            check_signature(outer["signature"]),
        )
