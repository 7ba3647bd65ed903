"""`ComputeOffer`: the EIP-712 struct a node signs to offer its hardware on the compute market.

Declared once, here (docs/interfaces.md, "The compute offer"). Signed in the same domain as
attestations and joins (GET /v1/eip712). The measured fields (``flops``, ``memory_bytes``,
``device_count``, ``bandwidth``) are what the timed hardware challenge measured; ``challenge``
names that challenge's result (a bytes32 id the ledger records; zero: none yet), and the ledger
ranks an offer whose challenge it cannot match after every verified one.

Units: ``memory_bytes`` per device, in bytes; ``flops`` per device, in FLOP/s of the challenge's
float32 matrix product (a dense matmul: what DiLoCo's inner steps spend their time on);
``bandwidth`` in bit/s, measured to the ledger or a peer (never a speed-test site);
``price_per_device_hour`` in wei; ``expiry`` in unix seconds. ``device_kind`` and ``region`` are
short ASCII labels ("nvidia-h200", "eu-west") left-aligned in a bytes32 (:func:`label_bytes32`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final

from protocol.eip712_struct import Eip712Struct, StructSpec
from protocol.errors import EncodingError
from protocol.types import Address, Bytes32

OFFER_PRIMARY_TYPE: Final = "ComputeOffer"

# (python attribute, EIP-712 name, solidity type) in struct order. The one declaration.
OFFER_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("node", "node", "address"),
    ("device_kind", "deviceKind", "bytes32"),
    ("device_count", "deviceCount", "uint32"),
    ("memory_bytes", "memoryBytes", "uint64"),
    ("flops", "flops", "uint64"),
    ("bandwidth", "bandwidth", "uint64"),
    ("region", "region", "bytes32"),
    ("price_per_device_hour", "pricePerDeviceHour", "uint256"),
    ("min_hours", "minHours", "uint32"),
    ("expiry", "expiry", "uint64"),
    ("nonce", "nonce", "uint64"),
    ("challenge", "challenge", "bytes32"),
)
OFFER_SPEC: Final = StructSpec(OFFER_PRIMARY_TYPE, OFFER_FIELDS, what="offer")
OFFER_ATTRS: Final = tuple(attr for attr, _, _ in OFFER_FIELDS)
OFFER_TYPE: Final = OFFER_SPEC.type_string
OFFER_TYPEHASH: Final = OFFER_SPEC.typehash

LABEL_MAX: Final = 32
_LABEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")


def label_bytes32(text: str, what: str = "label") -> Bytes32:
    """'nvidia-h200' -> its ASCII bytes, zero padded to 32 (lowercase letters, digits, '.', '_',
    '-'; at most 32 characters): a label every wallet shows as the same bytes32."""
    if not _LABEL.match(text):
        raise EncodingError(
            f"{what} {text!r}: use 1-32 lowercase letters, digits, '.', '_' or '-' "
            "(for example 'nvidia-h200', 'eu-west')",
            code="invalid_field",
        )
    return Bytes32(text.encode().ljust(LABEL_MAX, b"\0"))


def label_text(value: bytes) -> str:
    """The label a bytes32 holds ('nvidia-h200'); a value that is no label as its 0x-hex."""
    text = value.rstrip(b"\0")
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        return "0x" + value.hex()
    return decoded if _LABEL.match(decoded) else "0x" + value.hex()


@dataclass(frozen=True, slots=True)
class ComputeOffer(Eip712Struct):
    """One node's signed offer of its (measured) hardware at a price (docs/interfaces.md).

    Hashing, the digest, the wire JSON and the typed data all come from ``OFFER_SPEC``.
    """

    SPEC: ClassVar[StructSpec] = OFFER_SPEC

    node: Address
    device_kind: Bytes32
    device_count: int
    memory_bytes: int
    flops: int
    bandwidth: int
    region: Bytes32
    price_per_device_hour: int
    min_hours: int
    expiry: int
    nonce: int
    challenge: Bytes32

    def replace(self, **changes: Any) -> ComputeOffer:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ComputeOffer(**values)

    @property
    def verified_claim(self) -> bool:
        """It names a challenge result (whether the ledger matches it is the ledger's call)."""
        return any(self.challenge)
