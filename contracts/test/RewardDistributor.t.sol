// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {IRewardDistributor} from "../src/interfaces/IRewardDistributor.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

contract RewardDistributorTest is ColocoTest {
    event Claimed(address indexed account, uint256 amount, uint256 cumulativeAmount);

    address internal alice = makeAddr("alice");
    address internal bob = makeAddr("bob");
    address internal carol = makeAddr("carol");

    /// Tree of alice/bob/carol with the given cumulative amounts; returns it and commits its root.
    function _publish(uint256 a, uint256 b, uint256 c) internal returns (bytes32[] memory tree) {
        bytes32[] memory leaves = new bytes32[](3);
        leaves[0] = StandardMerkleTree.leaf(alice, a);
        leaves[1] = StandardMerkleTree.leaf(bob, b);
        leaves[2] = StandardMerkleTree.leaf(carol, c);
        tree = StandardMerkleTree.build(leaves);
        _commitRoot(tree[0]);
    }

    function _proof(bytes32[] memory tree, address account, uint256 amount)
        internal
        pure
        returns (bytes32[] memory)
    {
        return StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(account, amount));
    }

    function test_claim_mintsCumulativeAmountToAccount() public {
        bytes32[] memory tree = _publish(10e18, 20e18, 30e18);
        vm.expectEmit(address(distributor));
        emit Claimed(bob, 20e18, 20e18);
        vm.prank(stranger); // anyone may submit; tokens go to the account
        uint256 paid = distributor.claim(bob, 20e18, _proof(tree, bob, 20e18));
        assertEq(paid, 20e18);
        assertEq(token.balanceOf(bob), 20e18);
        assertEq(token.balanceOf(stranger), 0);
        assertEq(distributor.claimed(bob), 20e18);
        assertEq(token.delegates(bob), bob);
    }

    function test_claim_laterRootPaysOnlyTheDifference() public {
        bytes32[] memory tree = _publish(10e18, 20e18, 30e18);
        distributor.claim(alice, 10e18, _proof(tree, alice, 10e18));
        tree = _publish(15e18, 20e18, 45e18);
        uint256 paid = distributor.claim(alice, 15e18, _proof(tree, alice, 15e18));
        assertEq(paid, 5e18);
        assertEq(token.balanceOf(alice), 15e18);
        // carol skipped a round and still gets everything in one claim
        assertEq(distributor.claim(carol, 45e18, _proof(tree, carol, 45e18)), 45e18);
    }

    function test_claim_revertsOnSecondClaim() public {
        bytes32[] memory tree = _publish(10e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(tree, alice, 10e18);
        distributor.claim(alice, 10e18, proof);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.NothingToClaim.selector, alice, 10e18, 10e18)
        );
        distributor.claim(alice, 10e18, proof);
        assertEq(token.balanceOf(alice), 10e18);
    }

    function test_claim_revertsOnStaleRoot() public {
        bytes32[] memory old = _publish(10e18, 20e18, 30e18);
        _publish(11e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(old, alice, 10e18);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.InvalidProof.selector, alice, 10e18)
        );
        distributor.claim(alice, 10e18, proof);
    }

    function test_claim_revertsOnInflatedAmountOrWrongAccount() public {
        bytes32[] memory tree = _publish(10e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(tree, alice, 10e18);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.InvalidProof.selector, alice, 11e18)
        );
        distributor.claim(alice, 11e18, proof);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.InvalidProof.selector, stranger, 10e18)
        );
        distributor.claim(stranger, 10e18, proof);
    }

    function test_claim_revertsBeforeAnyRoot() public {
        vm.expectRevert(IRewardDistributor.NoRewardsRoot.selector);
        distributor.claim(alice, 1, new bytes32[](0));
    }

    function testFuzz_claim_paysExactlyCumulativeOverRounds(uint64[4] memory steps) public {
        uint256 cumulative;
        for (uint256 i; i < steps.length; ++i) {
            cumulative += steps[i];
            bytes32[] memory tree = _publish(cumulative, 1, 2);
            if (steps[i] == 0 && cumulative == distributor.claimed(alice)) {
                bytes32[] memory p = _proof(tree, alice, cumulative);
                vm.expectPartialRevert(IRewardDistributor.NothingToClaim.selector);
                distributor.claim(alice, cumulative, p);
            } else {
                assertEq(
                    distributor.claim(alice, cumulative, _proof(tree, alice, cumulative)), steps[i]
                );
            }
            assertEq(token.balanceOf(alice), cumulative);
        }
        assertEq(token.totalSupply(), cumulative);
    }

    /// Golden trees from the Python side (tests/vectors/rewards_tree.json): this helper rebuilds
    /// the same root, and every published proof verifies against it.
    function test_goldenVectors_rootsAndProofs() public view {
        string memory json = vm.readFile("tests/vectors/rewards_tree.json");
        for (uint256 t;; ++t) {
            string memory base = string.concat(".[", vm.toString(t), "]");
            if (!vm.keyExistsJson(json, base)) break;
            bytes32 root = vm.parseJsonBytes32(json, string.concat(base, ".root"));
            uint256 n;
            while (vm.keyExistsJson(json, string.concat(base, ".values[", vm.toString(n), "]"))) {
                ++n;
            }
            bytes32[] memory leaves = new bytes32[](n);
            for (uint256 i; i < n; ++i) {
                string memory v = string.concat(base, ".values[", vm.toString(i), "]");
                address account = vm.parseAddress(vm.parseJsonString(json, string.concat(v, "[0]")));
                uint256 amount = vm.parseUint(vm.parseJsonString(json, string.concat(v, "[1]")));
                leaves[i] = StandardMerkleTree.leaf(account, amount);
                bytes32[] memory proof = vm.parseJsonBytes32Array(
                    json, string.concat(base, ".proofs[", vm.toString(i), "].proof")
                );
                assertTrue(MerkleProof.verify(proof, root, leaves[i]));
            }
            assertEq(StandardMerkleTree.build(leaves)[0], root);
        }
    }
}
