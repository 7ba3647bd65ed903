"""The rewards Merkle tree, laid out exactly like OpenZeppelin's ``StandardMerkleTree`` (JS).

Leaf encoding ``["address", "uint256"]``: ``leaf = keccak256(keccak256(abi.encode(account,
amount)))``; inner nodes hash the sorted pair; leaves are sorted by hash and stored at the end of
a flat array, parents at ``(i - 1) // 2``. Same values -> same root and proofs as
``StandardMerkleTree.of(values, ["address", "uint256"])``, so OpenZeppelin's
``MerkleProof.verify`` in ``RewardDistributor`` accepts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


def lease_leaf_hash(
    contract: Address, lease_id: bytes, cumulative_wei: int, through: int
) -> Bytes32:
    """A ComputeLeases leaf of the same tree: ``keccak256(bytes.concat(keccak256(abi.encode(
    contract, leaseId, cumulativeWei, throughRound))))``. Four words, so it can never equal an
    ``(account, amount)`` leaf (two words), and bound to one ComputeLeases contract."""
    check_address("contract", contract)
    if not isinstance(lease_id, bytes) or len(lease_id) != 32:
        raise MerkleError("lease leaf: lease id must be 32 bytes")
    check_uint("cumulative_wei", cumulative_wei, 256)
    check_uint("through", through, 64)
    encoded = (
        encode_address(contract) + lease_id + encode_uint(cumulative_wei) + encode_uint(through)
    )
    return Bytes32(keccak256(keccak256(encoded)))


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

    _extra_index: Mapping[Bytes32, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls, values: Iterable[tuple[Address, int]], extra: Iterable[Bytes32] = ()
    ) -> RewardsTree:
        """Build from ``(account, cumulative amount)`` pairs (accounts unique) and ``extra`` leaf
        hashes of other encodings (the lease leaves: :func:`lease_leaf_hash`)."""
        pairs = tuple(values)
        extras = tuple(dict.fromkeys(extra))
        if not pairs and not extras:
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
        hashed += [(leaf, -1 - k) for k, leaf in enumerate(extras)]
        hashed.sort(key=lambda item: item[0])
        n = len(hashed)
        nodes: list[bytes] = [b""] * (2 * n - 1)
        index: dict[Address, int] = {}
        extra_index: dict[Bytes32, int] = {}
        for position, (leaf, value_index) in enumerate(hashed):
            tree_index = len(nodes) - 1 - position
            nodes[tree_index] = leaf
            if value_index >= 0:
                index[pairs[value_index][0]] = tree_index
            else:
                extra_index[Bytes32(leaf)] = tree_index
        for i in range(len(nodes) - 1 - n, -1, -1):
            nodes[i] = hash_pair(nodes[2 * i + 1], nodes[2 * i + 2])
        return cls(
            values=pairs,
            nodes=tuple(Bytes32(x) for x in nodes),
            _tree_index=index,
            _extra_index=extra_index,
        )

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
        return self._path(self._leaf_index(account))

    def extra_proof(self, leaf: Bytes32) -> list[Bytes32]:
        """The proof of an ``extra`` leaf (a lease leaf) given by its hash."""
        index = self._extra_index.get(Bytes32(leaf))
        if index is None:
            raise MerkleError(f"rewards tree: no leaf 0x{bytes(leaf).hex()}")
        return self._path(index)

    def _path(self, index: int) -> list[Bytes32]:
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
