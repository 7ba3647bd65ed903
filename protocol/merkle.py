"""The rewards Merkle tree, laid out exactly like OpenZeppelin's ``StandardMerkleTree`` (JS).

Leaf encoding ``["address", "uint256"]``: ``leaf = keccak256(keccak256(abi.encode(account,
amount)))``; inner nodes hash the sorted pair; leaves are sorted by hash and stored at the end of
a flat array, parents at ``(i - 1) // 2``. Same values -> same root and proofs as
``StandardMerkleTree.of(values, ["address", "uint256"])``, so OpenZeppelin's
``MerkleProof.verify`` in ``RewardDistributor`` accepts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.eip712 import check_address, check_uint, encode_address, encode_uint, keccak256
from protocol.errors import MerkleError
from protocol.types import Address, Bytes32

LEAF_ENCODING: Final = ("address", "uint256")


def leaf_hash(account: Address, amount: int) -> Bytes32:
    """``keccak256(bytes.concat(keccak256(abi.encode(account, amount))))``."""
    check_address("account", account)
    check_uint("amount", amount, 256)
    return Bytes32(keccak256(keccak256(encode_address(account) + encode_uint(amount))))


def hash_pair(a: bytes, b: bytes) -> Bytes32:
    """OpenZeppelin's commutative node hash: keccak of the two children, smaller first."""
    return Bytes32(keccak256(a + b if a <= b else b + a))


def process_proof(leaf: bytes, proof: Sequence[bytes]) -> Bytes32:
    """The root ``proof`` leads to from ``leaf`` (OpenZeppelin ``MerkleProof.processProof``)."""
    node = leaf
    for i, sibling in enumerate(proof):
        if not isinstance(sibling, bytes) or len(sibling) != 32:
            raise MerkleError(f"proof[{i}]: expected 32 bytes")
        node = hash_pair(node, sibling)
    return Bytes32(node)


def verify_proof(root: bytes, account: Address, amount: int, proof: Sequence[bytes]) -> bool:
    """Whether ``proof`` shows ``(account, amount)`` is a leaf of the tree with ``root``."""
    return process_proof(leaf_hash(account, amount), proof) == root


@dataclass(frozen=True)
class RewardsTree:
    """A built tree: ``values`` in the caller's order, ``nodes`` in OpenZeppelin's flat layout."""

    values: tuple[tuple[Address, int], ...]
    nodes: tuple[Bytes32, ...]
    _tree_index: Mapping[Address, int]

    @classmethod
    def build(cls, values: Iterable[tuple[Address, int]]) -> RewardsTree:
        """Build from ``(account, cumulative amount)`` pairs; accounts must be unique."""
        pairs = tuple(values)
        if not pairs:
            raise MerkleError("rewards tree: needs at least one (account, amount) leaf")
        seen: dict[str, int] = {}
        hashed: list[tuple[Bytes32, int]] = []
        for i, (account, amount) in enumerate(pairs):
            key = str(account).lower()
            if key in seen:
                raise MerkleError(
                    f"rewards tree: account {account} appears twice (values[{seen[key]}] and "
                    f"values[{i}]); merge its amounts into one cumulative leaf"
                )
            seen[key] = i
            hashed.append((leaf_hash(account, amount), i))
        hashed.sort(key=lambda item: item[0])
        n = len(hashed)
        nodes: list[bytes] = [b""] * (2 * n - 1)
        index: dict[Address, int] = {}
        for position, (leaf, value_index) in enumerate(hashed):
            tree_index = len(nodes) - 1 - position
            nodes[tree_index] = leaf
            index[pairs[value_index][0]] = tree_index
        for i in range(len(nodes) - 1 - n, -1, -1):
            nodes[i] = hash_pair(nodes[2 * i + 1], nodes[2 * i + 2])
        return cls(values=pairs, nodes=tuple(Bytes32(x) for x in nodes), _tree_index=index)

    @classmethod
    def from_amounts(cls, amounts: Mapping[Address, int]) -> RewardsTree:
        """Build from a mapping payout address -> cumulative amount (insertion order kept)."""
        return cls.build(amounts.items())

    @property
    def root(self) -> Bytes32:
        return self.nodes[0]

    def amount_of(self, account: Address) -> int:
        """The cumulative amount in ``account``'s leaf."""
        self._leaf_index(account)
        return dict(self.values)[account]

    def proof(self, account: Address) -> list[Bytes32]:
        """Sibling hashes from ``account``'s leaf up to the root (OpenZeppelin order)."""
        index = self._leaf_index(account)
        proof: list[Bytes32] = []
        while index > 0:
            sibling = index + 1 if index % 2 == 1 else index - 1
            proof.append(self.nodes[sibling])
            index = (index - 1) // 2
        return proof

    def _leaf_index(self, account: Address) -> int:
        try:
            return self._tree_index[account]
        except KeyError:
            raise MerkleError(f"rewards tree: no leaf for account {account}") from None

    def to_json(self) -> dict[str, object]:
        """The shape of ``tests/vectors/rewards_tree.json`` (amounts as decimal strings)."""
        return {
            "leaf_encoding": list(LEAF_ENCODING),
            "values": [[account, str(amount)] for account, amount in self.values],
            "root": "0x" + self.root.hex(),
            "proofs": [
                {
                    "value": [account, str(amount)],
                    "proof": ["0x" + p.hex() for p in self.proof(account)],
                }
                for account, amount in self.values
            ],
        }
