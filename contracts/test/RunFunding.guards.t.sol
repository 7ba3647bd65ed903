// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {IRunFunding} from "../src/interfaces/IRunFunding.sol";
import {FundingBase} from "./RunFunding.t.sol";

/// Guards of RunFunding that no other test exercised (each found by tools/mutate.py: the guard
/// could be removed and the suite still passed).
contract RunFundingGuardsTest is FundingBase {
    bytes32 internal constant OTHER = bytes32(uint256(7));

    function test_commitEthRoot_unknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRun.selector, OTHER));
        vm.prank(committer);
        funding.commitEthRoot(OTHER, 0, keccak256("root"), 1);
    }

    function test_commitEthRoot_cancelledRun() public {
        vm.prank(committer);
        funding.openRun(OTHER, uint64(block.timestamp) + 1000, 1 ether);
        vm.prank(address(timelock));
        funding.cancelRun(OTHER);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.RunIsCancelled.selector, OTHER, uint64(block.timestamp)
            )
        );
        vm.prank(committer);
        funding.commitEthRoot(OTHER, 0, keccak256("root"), 1);
    }

    function test_cancelRun_unknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRun.selector, OTHER));
        vm.prank(address(timelock));
        funding.cancelRun(OTHER);
    }

    function test_setEthPerRound_unknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRun.selector, OTHER));
        vm.prank(address(timelock));
        funding.setEthPerRound(OTHER, 1 ether);
    }

    function test_claimVested_unknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRun.selector, OTHER));
        funding.claimVested(OTHER, alice);
    }

    /// An account that refuses ETH gets a clear revert, and its claim is not recorded as paid.
    function test_claimEth_refusedTransferReverts() public {
        _deposit(alice, 2 ether);
        bytes32[] memory tree = _commitEth(0, 0.5 ether, 0.5 ether);
        vm.warp(block.timestamp + funding.disputeWindow());
        vm.etch(bob, hex"5f5ffd"); // PUSH0 PUSH0 REVERT: refuses every call
        bytes32[] memory proof = _proof(tree, bob, 0.5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.EthTransferFailed.selector, bob, 0.5 ether)
        );
        funding.claimEth(RUN, bob, 0.5 ether, tree[0], proof);
        assertEq(funding.ethClaimed(RUN, bob), 0);
    }

    function test_revokeEthRoot_onlyOnce() public {
        _deposit(alice, 2 ether);
        bytes32[] memory tree = _commitEth(0, 0.5 ether, 0.5 ether);
        vm.startPrank(guardian);
        funding.revokeEthRoot(RUN, tree[0]);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RootRevoked.selector, tree[0]));
        funding.revokeEthRoot(RUN, tree[0]);
        vm.stopPrank();
    }

    function test_claimEth_unknownRoot() public {
        bytes32 root = keccak256("never committed");
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRoot.selector, RUN, root));
        funding.claimEth(RUN, bob, 1, root, new bytes32[](0));
    }

    function test_setters_onlyGovernance() public {
        bytes memory refused = abi.encodeWithSelector(
            IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
        );
        vm.startPrank(guardian);
        vm.expectRevert(refused);
        funding.setVestingPeriod(60);
        vm.expectRevert(refused);
        funding.setDisputeWindow(2);
        vm.stopPrank();
    }
}
