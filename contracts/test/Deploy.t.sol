// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {Deploy} from "../script/Deploy.s.sol";

/// The production profile's bounds on the capital contracts (issue 25, F2).
contract DeployTest is Test {
    address internal committer = makeAddr("committer");
    address internal alice = makeAddr("alice");

    function _production() internal returns (Deploy.Deployed memory d) {
        Deploy deployer = new Deploy();
        Deploy.Params memory p = deployer.productionParams();
        p.committer = committer;
        p.treasury = makeAddr("treasury");
        p.guardian = makeAddr("guardian");
        d = deployer.deploy(p);
    }

    /// F2: a production deploy gave backers' ETH a 2 s dispute window and 60 s vesting.
    function test_attack_productionFundingWindowsAreAtLeastADay() public {
        Deploy.Deployed memory d = _production();
        assertGe(d.funding.disputeWindow(), 1 days, "ETH roots pay after less than a day");
        assertGe(d.funding.vestingPeriod(), 1 days, "capital vests in less than a day");
    }

    /// F2: the committer picked `ethPerRound` and claimed 100 of 100 ETH deposited in one root.
    function test_attack_committerCannotPayAllDepositsInOneRoot() public {
        vm.warp(1_700_000_000);
        Deploy.Deployed memory d = _production();
        bytes32 run = keccak256("run");
        vm.prank(committer);
        d.funding.openRun(run, uint64(block.timestamp + 30 days), 100 ether);
        vm.deal(alice, 100 ether);
        vm.prank(alice);
        d.funding.deposit{value: 100 ether}(run);
        vm.prank(committer);
        d.ledger.commitRound(run, 0, bytes32(0), keccak256("g"), 1, bytes32(0), 0);
        vm.prank(committer);
        try d.funding.commitEthRoot(run, 0, keccak256("all to me"), 100 ether) {} catch {}
        assertLe(d.funding.runOf(run).ethCommitted, 10 ether, "one root committed it all");
    }

    /// F2: each bound of RunFunding's production settings refuses a weak value.
    function test_checkProfile_boundsFundingInProduction() public {
        Deploy deployer = new Deploy();
        Deploy.Params memory p = deployer.productionParams();
        p.committer = committer;
        p.treasury = makeAddr("treasury");
        p.guardian = makeAddr("guardian");
        p.funding.disputeWindow = 2;
        vm.expectRevert(
            abi.encodeWithSelector(
                Deploy.ProductionBound.selector, "fundingDisputeWindow", 2, 1 days
            )
        );
        deployer.checkProfile(p, address(this));
        p.funding.disputeWindow = 1 days;
        p.funding.vestingPeriod = 60;
        vm.expectRevert(
            abi.encodeWithSelector(Deploy.ProductionBound.selector, "vestingPeriod", 60, 1 days)
        );
        deployer.checkProfile(p, address(this));
        p.funding.vestingPeriod = 1 days;
        p.funding.maxEthPerRootBps = 10_000;
        vm.expectRevert(
            abi.encodeWithSelector(Deploy.ProductionCap.selector, "maxEthPerRootBps", 10_000, 1000)
        );
        deployer.checkProfile(p, address(this));
        p.funding.maxEthPerRootBps = 1000;
        deployer.checkProfile(p, address(this));
    }
}
