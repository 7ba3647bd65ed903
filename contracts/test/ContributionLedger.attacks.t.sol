// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

/// Attacks of the committer key on the reward budget (issue 25).
contract ContributionLedgerAttackTest is ColocoTest {
    bytes32 internal constant ROOT = keccak256("finalized root");

    function _commit(bytes32 run, uint64 round, bytes32 root, uint256 reward) internal {
        vm.prank(committer);
        ledger.commitRound(
            run, round, root, keccak256(abi.encode(run, round)), 1, bytes32(0), reward
        );
    }

    /// F3: a root committed again after it finalized kept its first finality while its budget
    /// rose with every re-commit, so budget added under made-up run ids paid at once (4,000 CMS
    /// claimed in the block of the commits). A finalized root's budget never grows.
    function test_attack_finalizedRootCannotGainBudget() public {
        uint256 reward = config.rewardPerRound();
        _commit(DEFAULT_RUN, 0, bytes32(0), 0);
        _commit(DEFAULT_RUN, 1, ROOT, reward);
        vm.warp(block.timestamp + DISPUTE);
        ledger.claimable(ROOT); // final: pays now
        for (uint256 i = 1; i <= 40; ++i) {
            bytes32 madeUp = keccak256(abi.encode("made-up run", i));
            vm.prank(committer);
            try ledger.commitRound(
                madeUp, 0, ROOT, keccak256(abi.encode(i)), 1, bytes32(0), reward
            ) {}
                catch {}
        }
        (, uint256 budget) = ledger.claimable(ROOT);
        assertEq(budget, reward, "a finalized root's budget grew");
    }

    /// F3: even with no budget of its own, a repeated root took the budget other roots added
    /// (its budget was rewritten to the total), which paid at once since it stayed final.
    function test_attack_repeatedRootWithoutBudgetCannotTakeOthersBudget() public {
        uint256 reward = config.rewardPerRound();
        _commit(DEFAULT_RUN, 0, bytes32(0), 0);
        _commit(DEFAULT_RUN, 1, ROOT, reward);
        vm.warp(block.timestamp + DISPUTE);
        _commit(keccak256("made-up"), 0, keccak256("pending root"), reward);
        _commit(DEFAULT_RUN, 2, ROOT, 0);
        (, uint256 budget) = ledger.claimable(ROOT);
        assertEq(budget, reward, "a repeated root took a pending root's budget");
    }
}
