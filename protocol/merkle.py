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


def _proof(nodes: Sequence[Bytes32], index: int) -> list[Bytes32]:
    proof: list[Bytes32] = []
    while index > 0:
        proof.append(nodes[index + 1 if index % 2 == 1 else index - 1])
        index = (index - 1) // 2
    return proof


@dataclass(frozen=True)
class HashTree:
    """The layout of every tree here, over leaf hashes the caller made: OpenZeppelin's
    ``StandardMerkleTree`` (leaves sorted by hash at the end of the flat array ``nodes``,
    parents at ``(i - 1) // 2``, sorted-pair hashing), so :func:`process_proof` and
    ``MerkleProof.verify`` check its proofs. ``leaves`` keeps the caller's order: a leaf is named
    by its position there (a boundary's number in the round's trace, reference/trace.py)."""

    leaves: tuple[Bytes32, ...]
    nodes: tuple[Bytes32, ...]
    _sorted_position: tuple[int, ...]

    @classmethod
    def build(cls, leaves: Sequence[bytes]) -> HashTree:
        if not leaves:
            raise MerkleError("merkle tree: needs at least one leaf")
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, bytes) or len(leaf) != 32:
                raise MerkleError(f"merkle tree: leaves[{i}] is not 32 bytes")
        order = sorted(range(len(leaves)), key=lambda i: leaves[i])
        n = len(leaves)
        nodes: list[bytes] = [b""] * (2 * n - 1)
        position = [0] * n
        for rank, i in enumerate(order):
            nodes[len(nodes) - 1 - rank] = leaves[i]
            position[i] = rank
        for i in range(len(nodes) - 1 - n, -1, -1):
            nodes[i] = hash_pair(nodes[2 * i + 1], nodes[2 * i + 2])
        return cls(
            leaves=tuple(Bytes32(x) for x in leaves),
            nodes=tuple(Bytes32(x) for x in nodes),
            _sorted_position=tuple(position),
        )

    @property
    def root(self) -> Bytes32:
        return self.nodes[0]

    def tree_index(self, leaf: int) -> int:
        """The flat-array index in ``nodes`` of ``leaves[leaf]``."""
        if not 0 <= leaf < len(self.leaves):
            raise MerkleError(f"merkle tree: no leaf {leaf} (it has {len(self.leaves)})")
        return len(self.nodes) - 1 - self._sorted_position[leaf]

    def proof(self, leaf: int) -> list[Bytes32]:
        """Sibling hashes from ``leaves[leaf]`` up to the root (OpenZeppelin order)."""
        return _proof(self.nodes, self.tree_index(leaf))


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
        hashed: list[Bytes32] = []
        for i, (account, amount) in enumerate(pairs):
            key = str(account).lower()
            if key in seen:
                raise MerkleError(
                    f"rewards tree: account {account} appears twice (values[{seen[key]}] and "
                    f"values[{i}]); merge its amounts into one cumulative leaf"
                )
            seen[key] = i
            hashed.append(leaf_hash(account, amount))
        hashed += extras
        tree = HashTree.build(hashed)
        index = {account: tree.tree_index(i) for i, (account, _) in enumerate(pairs)}
        extra_index = {
            Bytes32(leaf): tree.tree_index(len(pairs) + k) for k, leaf in enumerate(extras)
        }
        return cls(values=pairs, nodes=tree.nodes, _tree_index=index, _extra_index=extra_index)

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
        return _proof(self.nodes, self._leaf_index(account))

    def extra_proof(self, leaf: Bytes32) -> list[Bytes32]:
        """The proof of an ``extra`` leaf (a lease leaf) given by its hash."""
        index = self._extra_index.get(Bytes32(leaf))
        if index is None:
            raise MerkleError(f"rewards tree: no leaf 0x{bytes(leaf).hex()}")
        return _proof(self.nodes, index)

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
