// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title StandardMerkleTree (test helper)
/// @notice Builds OpenZeppelin StandardMerkleTree trees of (address, uint256) leaves in memory,
/// laid out exactly as the OpenZeppelin merkle-tree package does: leaf hashes sorted ascending, stored at the
/// end of a (2n-1)-node array in reverse, parents hashed as sorted pairs. Roots therefore match
/// the JavaScript and the Python (protocol.merkle) implementations; see RewardDistributor.t.sol.
library StandardMerkleTree {
    error NoLeaves();
    error LeafNotInTree(bytes32 leafHash);

    /// @notice The leaf of (account, cumulativeAmount): keccak256(keccak256(abi.encode(...))).
    function leaf(address account, uint256 amount) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, amount))));
    }

    /// @notice The full tree array (root at index 0) over the given leaf hashes.
    function build(bytes32[] memory leaves) internal pure returns (bytes32[] memory tree) {
        uint256 n = leaves.length;
        if (n == 0) revert NoLeaves();
        bytes32[] memory sorted = _sorted(leaves);
        tree = new bytes32[](2 * n - 1);
        for (uint256 i; i < n; ++i) {
            tree[tree.length - 1 - i] = sorted[i];
        }
        // Internal nodes n-2 .. 0, children at 2i+1 and 2i+2.
        for (uint256 i = n - 1; i > 0; --i) {
            uint256 j = i - 1;
            tree[j] = _hashPair(tree[2 * j + 1], tree[2 * j + 2]);
        }
    }

    /// @notice The proof for `leafHash` (which must be in `tree`).
    function proof(bytes32[] memory tree, bytes32 leafHash)
        internal
        pure
        returns (bytes32[] memory path)
    {
        uint256 n = (tree.length + 1) / 2;
        uint256 index = type(uint256).max;
        for (uint256 i = tree.length - n; i < tree.length; ++i) {
            if (tree[i] == leafHash) {
                index = i;
                break;
            }
        }
        if (index == type(uint256).max) revert LeafNotInTree(leafHash);
        uint256 depth;
        for (uint256 i = index; i > 0; i = (i - 1) / 2) {
            ++depth;
        }
        path = new bytes32[](depth);
        for (uint256 k; index > 0; ++k) {
            // Odd indices are left children (sibling to the right), even ones right children.
            path[k] = tree[index % 2 == 1 ? index + 1 : index - 1];
            index = (index - 1) / 2;
        }
    }

    function _hashPair(bytes32 a, bytes32 b) private pure returns (bytes32) {
        return a < b ? keccak256(abi.encode(a, b)) : keccak256(abi.encode(b, a));
    }

    /// @dev A sorted copy (ascending as unsigned 256-bit integers) by bottom-up merge sort, so
    /// the 1,024-leaf gas fixture builds quickly. `src` is left untouched.
    function _sorted(bytes32[] memory src) private pure returns (bytes32[] memory a) {
        uint256 n = src.length;
        a = new bytes32[](n);
        for (uint256 i; i < n; ++i) {
            a[i] = src[i];
        }
        bytes32[] memory buf = new bytes32[](n);
        for (uint256 width = 1; width < n; width *= 2) {
            for (uint256 lo; lo < n; lo += 2 * width) {
                uint256 mid = lo + width < n ? lo + width : n;
                uint256 hi = lo + 2 * width < n ? lo + 2 * width : n;
                (uint256 i, uint256 j) = (lo, mid);
                for (uint256 k = lo; k < hi; ++k) {
                    if (i < mid && (j >= hi || a[i] <= a[j])) {
                        buf[k] = a[i++];
                    } else {
                        buf[k] = a[j++];
                    }
                }
            }
            (a, buf) = (buf, a);
        }
    }
}
