// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {Deploy} from "../../script/Deploy.s.sol";
import {CodeRegistry} from "../../src/CodeRegistry.sol";
import {ContributionLedger} from "../../src/ContributionLedger.sol";
import {ModelGovernor} from "../../src/ModelGovernor.sol";
import {ModelShareToken} from "../../src/ModelShareToken.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {RunFunding} from "../../src/RunFunding.sol";
import {StakeManager} from "../../src/StakeManager.sol";
import {TrainingConfig} from "../../src/TrainingConfig.sol";

/// @notice Base for contract tests: the whole system deployed and wired by the real Deploy
/// script, with named actors. Privileged calls are made by pranking the Timelock or committer.
abstract contract ColocoTest is Test {
    uint64 internal constant UNBONDING = 7 days;
    uint256 internal constant GRANT_CAP = 1_000_000e18;

    address internal committer = makeAddr("committer");
    address internal treasury = makeAddr("treasury");
    address internal operator = makeAddr("operator");
    address internal payout = makeAddr("payout");
    address internal node = makeAddr("node");
    address internal stranger = makeAddr("stranger");

    StakeManager internal stakeManager;
    ContributionLedger internal ledger;
    ModelShareToken internal token;
    RewardDistributor internal distributor;
    TrainingConfig internal config;
    ModelGovernor internal governor;
    TimelockController internal timelock;
    RunFunding internal funding;
    CodeRegistry internal codeRegistry;

    function setUp() public virtual {
        Deploy.Params memory p = Deploy.Params({
            committer: committer,
            treasury: treasury,
            votingDelay: 1,
            votingPeriod: 20,
            quorumFraction: 4,
            timelockDelay: 1,
            unbondingDelay: UNBONDING,
            grantCap: GRANT_CAP,
            proposalThreshold: 0,
            initialInnerSteps: 0
        });
        Deploy.Deployed memory d = new Deploy().deploy(p);
        stakeManager = d.stakeManager;
        ledger = d.ledger;
        token = d.token;
        distributor = d.distributor;
        config = d.config;
        governor = d.governor;
        timelock = d.timelock;
        funding = d.funding;
        codeRegistry = d.codeRegistry;
        vm.deal(operator, 1000 ether);
        vm.deal(stranger, 1000 ether);
    }

    /// @dev Registers `node_` for `operator` and stakes `amount` for it.
    function _registerAndStake(address node_, uint256 amount) internal {
        vm.startPrank(operator);
        stakeManager.register(node_, payout);
        stakeManager.stake{value: amount}(node_);
        vm.stopPrank();
    }

    /// @dev Commits `root` as the latest rewards root (run 1, next round).
    function _commitRoot(bytes32 root) internal {
        bytes32 run = bytes32(uint256(1));
        uint64 round = ledger.hasCommitted(run) ? ledger.lastRound(run) + 1 : 0;
        vm.prank(committer);
        ledger.commitRound(run, round, root, keccak256(abi.encode(round)), 1, bytes32(0));
    }
}
