// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {IRewardDistributor} from "../src/interfaces/IRewardDistributor.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

contract RewardDistributorTest is ColocoTest {
    event Claimed(address indexed account, uint256 amount, uint256 cumulativeAmount);

    address internal alice = makeAddr("alice");
    address internal bob = makeAddr("bob");
    address internal carol = makeAddr("carol");

    function _tree(uint256 a, uint256 b, uint256 c) internal view returns (bytes32[] memory) {
        bytes32[] memory leaves = new bytes32[](3);
        leaves[0] = StandardMerkleTree.leaf(alice, a);
        leaves[1] = StandardMerkleTree.leaf(bob, b);
        leaves[2] = StandardMerkleTree.leaf(carol, c);
        return StandardMerkleTree.build(leaves);
    }

    /// Tree of alice/bob/carol with the given cumulative amounts; commits its root with the full
    /// per-round budget and lets the dispute window pass.
    function _publish(uint256 a, uint256 b, uint256 c) internal returns (bytes32[] memory tree) {
        tree = _tree(a, b, c);
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
        assertEq(distributor.lastRootIndex(bob), 1);
        assertEq(distributor.totalClaimed(), 20e18);
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

    /// Attack (claims raced the next commit): a commit no longer invalidates a claim in flight.
    function test_attack_commitDoesNotInvalidateClaimInFlight() public {
        bytes32[] memory old = _publish(10e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(old, alice, 10e18);
        _commit(_tree(11e18, 20e18, 30e18)[0], 1e18); // the next commit lands first, pending
        assertEq(distributor.claim(alice, 10e18, proof), 10e18);
    }

    function test_claim_revertsOnRootOlderThanLastClaimed() public {
        bytes32[] memory old = _publish(10e18, 20e18, 30e18);
        bytes32[] memory fresh = _publish(11e18, 20e18, 30e18);
        distributor.claim(alice, 11e18, _proof(fresh, alice, 11e18));
        bytes32[] memory proof = _proof(old, alice, 10e18);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.StaleRoot.selector, alice, 1, 2));
        distributor.claim(alice, 10e18, proof);
    }

    function test_claim_revertsOnPendingUnknownOrRevokedRoot() public {
        bytes32[] memory tree = _tree(10e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(tree, alice, 10e18);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.InvalidProof.selector, alice, 10e18)
        );
        distributor.claim(alice, 10e18, proof);
        _commit(tree[0], 60e18);
        uint64 at = uint64(block.timestamp) + DISPUTE;
        vm.expectRevert(
            abi.encodeWithSelector(IContributionLedger.RootPending.selector, tree[0], at)
        );
        distributor.claim(alice, 10e18, proof);
        vm.prank(guardian);
        ledger.revokeRoot(tree[0]);
        vm.warp(at);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, tree[0]));
        distributor.claim(alice, 10e18, proof);
        assertEq(token.totalSupply(), 0);
    }

    /// Attack (the committer mints without limit): a root paying the committer 1e30 pays nothing
    /// beyond the committed budget.
    function test_attack_rootBeyondBudgetPaysNothingBeyondIt() public {
        address thief = makeAddr("thief");
        bytes32[] memory leaves = new bytes32[](2);
        leaves[0] = StandardMerkleTree.leaf(thief, 1e30);
        leaves[1] = StandardMerkleTree.leaf(alice, 1);
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        _commitRoot(tree[0]); // carries at most rewardPerRound
        uint256 budget = ledger.totalBudget();
        assertEq(budget, config.rewardPerRound());
        bytes32[] memory proof = _proof(tree, thief, 1e30);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.BudgetExceeded.selector, 1e30, budget)
        );
        distributor.claim(thief, 1e30, proof);
        assertEq(token.balanceOf(thief), 0);
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

    function test_pause_guardianStopsClaimsGovernanceResumes() public {
        bytes32[] memory tree = _publish(10e18, 20e18, 30e18);
        bytes32[] memory proof = _proof(tree, alice, 10e18);
        vm.prank(guardian);
        distributor.pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        distributor.claim(alice, 10e18, proof);
        vm.expectRevert(abi.encodeWithSelector(IRewardDistributor.NotGuardian.selector, stranger));
        vm.prank(stranger);
        distributor.pause();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
            )
        );
        vm.prank(guardian);
        distributor.unpause();
        vm.prank(address(timelock));
        distributor.unpause();
        assertEq(distributor.claim(alice, 10e18, proof), 10e18);
    }

    function testFuzz_claim_paysExactlyCumulativeOverRounds(uint64[4] memory steps) public {
        uint256 cumulative;
        for (uint256 i; i < steps.length; ++i) {
            cumulative += steps[i];
            bytes32[] memory tree = _publish(cumulative, 1, 2);
            bytes32[] memory p = _proof(tree, alice, cumulative);
            if (steps[i] == 0 && cumulative == distributor.claimed(alice)) {
                vm.expectRevert(
                    abi.encodeWithSelector(
                        IRewardDistributor.NothingToClaim.selector, alice, cumulative, cumulative
                    )
                );
                distributor.claim(alice, cumulative, p);
            } else {
                assertEq(distributor.claim(alice, cumulative, p), steps[i]);
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
