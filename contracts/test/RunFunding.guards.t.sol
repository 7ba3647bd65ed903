// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {IRunFunding} from "../src/interfaces/IRunFunding.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// Guards of RunFunding that no other test exercised (each found by tools/mutate.py: the guard
/// could be removed and the suite still passed).
contract RunFundingGuardsTest is ColocoTest {
    bytes32 internal constant RUN = bytes32(uint256(7));

    function test_commitEthRoot_unknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.UnknownRun.selector, RUN));
        vm.prank(committer);
        funding.commitEthRoot(RUN, 0, keccak256("root"), 1);
    }

    function test_commitEthRoot_cancelledRun() public {
        vm.prank(committer);
        funding.openRun(RUN, uint64(block.timestamp) + 1000, 1 ether);
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.RunIsCancelled.selector, RUN, uint64(block.timestamp)
            )
        );
        vm.prank(committer);
        funding.commitEthRoot(RUN, 0, keccak256("root"), 1);
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
