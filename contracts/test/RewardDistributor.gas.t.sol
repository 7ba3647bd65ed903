// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Claims against a 1,024-account tree (proofs of 10 hashes), measured with cold storage and
/// committed in contracts/snapshots/RewardDistributor.json (execution gas of the claim call).
abstract contract ClaimGasBase is ColocoTest {
    uint256 internal constant ACCOUNTS = 1024;
    uint256 internal constant PICK = 517;

    function _account(uint256 i) internal pure returns (address) {
        // full-width addresses, so calldata costs what real claims cost
        return vm.addr(0xC0C00000 + i);
    }

    function _amount(uint256 i, uint256 epoch) internal pure returns (uint256) {
        return (i + 1) * 1e18 * (epoch + 1);
    }

    function _tree(uint256 epoch) internal pure returns (bytes32[] memory) {
        bytes32[] memory leaves = new bytes32[](ACCOUNTS);
        for (uint256 i; i < ACCOUNTS; ++i) {
            leaves[i] = StandardMerkleTree.leaf(_account(i), _amount(i, epoch));
        }
        return StandardMerkleTree.build(leaves);
    }

    function setUp() public virtual override {
        super.setUp();
        vm.prank(address(timelock));
        config.setRewardPerRound(1_000_000e18);
    }

    function _claim(uint256 epoch) internal {
        bytes32[] memory tree = _tree(epoch);
        bytes32[] memory proof = StandardMerkleTree.proof(
            tree, StandardMerkleTree.leaf(_account(PICK), _amount(PICK, epoch))
        );
        assertEq(proof.length, 10);
        distributor.claim(_account(PICK), _amount(PICK, epoch), proof);
    }
}

contract RewardDistributorFirstClaimGasTest is ClaimGasBase {
    function setUp() public override {
        super.setUp();
        _commitRoot(_tree(0)[0]);
        // another holder already exists, so total-supply checkpoints are not first-ever writes
        vm.warp(block.timestamp + 1);
        bytes32[] memory tree = _tree(0);
        distributor.claim(
            _account(1),
            _amount(1, 0),
            StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(_account(1), _amount(1, 0)))
        );
        vm.warp(block.timestamp + 1);
    }

    function test_gas_claim_first_1024() public {
        _claim(0);
        uint256 gasUsed = vm.snapshotGasLastCall("RewardDistributor", "exec_claim_first_1024");
        assertEq(token.balanceOf(_account(PICK)), _amount(PICK, 0));
        assertLe(gasUsed, 200_000);
    }
}

contract RewardDistributorLaterClaimGasTest is ClaimGasBase {
    function setUp() public override {
        super.setUp();
        _commitRoot(_tree(0)[0]);
        vm.warp(block.timestamp + 1);
        _claim(0);
        _commitRoot(_tree(1)[0]);
        vm.warp(block.timestamp + 1);
    }

    function test_gas_claim_later_1024() public {
        _claim(1);
        uint256 gasUsed = vm.snapshotGasLastCall("RewardDistributor", "exec_claim_later_1024");
        assertEq(token.balanceOf(_account(PICK)), _amount(PICK, 1));
        assertLe(gasUsed, 130_000);
    }
}
