"""`NodeKeyProof`: a node key's consent to be registered (``StakeManager.register`` and
``rotateNodeKey``). Declared once, here; its Solidity twin is
``StakeManager.NODE_KEY_PROOF_TYPEHASH``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.eip712_struct import Eip712Struct, StructSpec
from protocol.types import Address

NODE_KEY_PROOF_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("operator", "operator", "address"),
    ("payout", "payout", "address"),
    ("nonce", "nonce", "uint256"),
    ("deadline", "deadline", "uint256"),
)
NODE_KEY_PROOF_SPEC: Final = StructSpec(
    "NodeKeyProof", NODE_KEY_PROOF_FIELDS, what="node key proof"
)
NODE_KEY_PROOF_TYPE: Final = NODE_KEY_PROOF_SPEC.type_string
NODE_KEY_PROOF_TYPEHASH: Final = NODE_KEY_PROOF_SPEC.typehash


@dataclass(frozen=True)
class NodeKeyProof(Eip712Struct):
    """What a node key signs so that ``StakeManager.register`` / ``rotateNodeKey`` bind it to
    ``operator`` (the sender) with rewards to ``payout``. Domain: coloco/1 with the StakeManager
    as verifying contract; ``nonce`` is ``StakeManager.nonces(node)``, ``deadline`` unix seconds.
    Without it anybody could register (front-run, or blacklist by rotating away) a key it does
    not hold.
    """

    SPEC: ClassVar[StructSpec] = NODE_KEY_PROOF_SPEC

    operator: Address
    payout: Address
    nonce: int
    deadline: int
