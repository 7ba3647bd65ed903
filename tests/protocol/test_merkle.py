"""Rewards tree: OpenZeppelin StandardMerkleTree layout, proofs, and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.eip712 import keccak256, to_checksum_address
from protocol.errors import EncodingError, MerkleError
from protocol.merkle import (
    HashTree,
    RewardsTree,
    hash_pair,
    leaf_hash,
    lease_leaf_hash,
    process_proof,
    verify_proof,
)
from protocol.types import Address
from tests.vectors.generate import vector_address

accounts = st.lists(st.binary(min_size=20, max_size=20), min_size=1, max_size=40, unique=True).map(
    lambda raws: [Address(to_checksum_address(r)) for r in raws]
)
amounts = st.integers(0, 2**256 - 1)


def test_leaf_is_double_keccak_of_abi_encoding() -> None:
    account = vector_address("leaf")
    encoded = bytes(12) + bytes.fromhex(account[2:]) + (10**18).to_bytes(32, "big")
    assert leaf_hash(account, 10**18) == keccak256(keccak256(encoded))


def test_single_leaf_tree_root_is_the_leaf() -> None:
    account = vector_address("only")
    tree = RewardsTree.from_amounts({account: 5})
    assert tree.root == leaf_hash(account, 5)
    assert tree.proof(account) == []
    assert verify_proof(tree.root, account, 5, [])


def test_two_leaves_root_is_sorted_pair_hash() -> None:
    a, b = vector_address("a"), vector_address("b")
    tree = RewardsTree.build([(a, 1), (b, 2)])
    la, lb = leaf_hash(a, 1), leaf_hash(b, 2)
    assert tree.root == keccak256(min(la, lb) + max(la, lb))
    assert tree.proof(a) == [lb] and tree.proof(b) == [la]
    assert hash_pair(la, lb) == hash_pair(lb, la)


def test_refusals() -> None:
    a = vector_address("dup")
    with pytest.raises(MerkleError, match="at least one"):
        RewardsTree.build([])
    with pytest.raises(MerkleError, match=r"appears twice \(values\[0\] and values\[1\]\)"):
        RewardsTree.build([(a, 1), (Address(a.lower()), 2)])
    with pytest.raises(EncodingError, match="amount: -1 is out of range for uint256"):
        RewardsTree.build([(a, -1)])
    with pytest.raises(EncodingError, match=r"account: .* not EIP-55"):
        RewardsTree.build([(Address(a.lower()), 1)])
    tree = RewardsTree.build([(a, 1)])
    with pytest.raises(MerkleError, match="no leaf for account"):
        tree.proof(vector_address("stranger"))
    with pytest.raises(MerkleError, match=r"proof\[0\]: expected 32 bytes"):
        process_proof(tree.root, [b"\x00" * 31])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), accts=accounts)
def test_every_proof_verifies_and_any_change_fails(
    data: st.DataObject, accts: list[Address]
) -> None:
    values = [(a, data.draw(amounts)) for a in accts]
    tree = RewardsTree.build(values)
    for account, amount in values:
        proof = tree.proof(account)
        assert verify_proof(tree.root, account, amount, proof)
        assert tree.amount_of(account) == amount
    account, amount = values[data.draw(st.integers(0, len(values) - 1))]
    proof = tree.proof(account)
    other = (amount + data.draw(st.integers(1, 2**64))) % 2**256
    assert not verify_proof(tree.root, account, other, proof)
    stranger = Address(to_checksum_address(keccak256(account.encode())[:20]))
    assert not verify_proof(tree.root, stranger, amount, proof)
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        flipped = bytes([proof[i][0] ^ 1]) + proof[i][1:]
        assert not verify_proof(tree.root, account, amount, [*proof[:i], flipped, *proof[i + 1 :]])
        assert not verify_proof(tree.root, account, amount, proof[:-1])


@settings(max_examples=20, deadline=None)
@given(accts=accounts)
def test_root_is_independent_of_input_order_and_depth_is_logarithmic(accts: list[Address]) -> None:
    values = [(a, i) for i, a in enumerate(accts)]
    tree = RewardsTree.build(values)
    assert RewardsTree.build(list(reversed(values))).root == tree.root
    depth = max(len(tree.proof(a)) for a in accts)
    assert depth <= max(1, len(accts) - 1).bit_length()


def test_lease_leaf_is_double_keccak_of_four_words_and_never_a_reward_leaf() -> None:
    contract, lease = vector_address("leases"), keccak256(b"lease")
    encoded = (
        bytes(12) + bytes.fromhex(contract[2:]) + lease + (7).to_bytes(32, "big")
        + (3).to_bytes(32, "big")
    )  # fmt: skip
    assert lease_leaf_hash(contract, lease, 7, 3) == keccak256(keccak256(encoded))
    assert lease_leaf_hash(contract, lease, 7, 3) != leaf_hash(contract, 7)
    with pytest.raises(MerkleError, match="32 bytes"):
        lease_leaf_hash(contract, b"short", 7, 3)


@settings(max_examples=20, deadline=None)
@given(accts=accounts, n_extra=st.integers(1, 9))
def test_extra_leaves_share_the_root_and_prove_beside_the_accounts(
    accts: list[Address], n_extra: int
) -> None:
    contract = vector_address("leases")
    extra = [lease_leaf_hash(contract, keccak256(bytes([i])), i, 1) for i in range(n_extra)]
    tree = RewardsTree.build([(a, i) for i, a in enumerate(accts)], extra + extra[:1])
    for leaf in extra:
        assert process_proof(leaf, tree.extra_proof(leaf)) == tree.root
    for i, a in enumerate(accts):
        assert verify_proof(tree.root, a, i, tree.proof(a))
    assert tree.root != RewardsTree.build([(a, i) for i, a in enumerate(accts)]).root
    only = RewardsTree.build([], extra)  # a round with leases and no rewards yet
    assert process_proof(extra[0], only.extra_proof(extra[0])) == only.root
    with pytest.raises(MerkleError, match="no leaf"):
        tree.extra_proof(keccak256(b"not a leaf"))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40))
def test_a_hash_tree_proves_each_leaf_by_its_position(leaves: list[bytes]) -> None:
    """HashTree (the round trace's tree) names leaves by the caller's order, whatever their hash
    order, and is the rewards tree's layout: the same leaves give the same root."""
    tree = HashTree.build(leaves)
    for i, leaf in enumerate(leaves):
        assert process_proof(leaf, tree.proof(i)) == tree.root
        assert tree.nodes[tree.tree_index(i)] == leaf
    assert HashTree.build(list(reversed(leaves))).root == tree.root
    with pytest.raises(MerkleError, match="no leaf"):
        tree.proof(len(leaves))
    if len(set(leaves)) > 1:
        changed = [*leaves[:-1], keccak256(leaves[-1])]
        assert HashTree.build(changed).root != tree.root


def test_a_hash_tree_refuses_no_leaves_and_short_ones() -> None:
    with pytest.raises(MerkleError, match="at least one leaf"):
        HashTree.build([])
    with pytest.raises(MerkleError, match=r"leaves\[1\] is not 32 bytes"):
        HashTree.build([bytes(32), bytes(31)])
