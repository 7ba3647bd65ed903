// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {FundingBase} from "./RunFunding.t.sol";

/// Attacks of the committer key on RunFunding, and the capital weight (issue 25).
contract RunFundingAttackTest is FundingBase {
    /// F1: every commitEthRoot minted a round's capital share, even for a round committed with
    /// no compute budget and an ETH root revoked at once (300 pairs minted 3,000 CMS). Capital
    /// accrues only for compute budget the ledger committed, and only from final roots.
    function test_attack_committerCannotMintCapitalWithoutComputeBudget() public {
        _deposit(alice, 10 ether);
        for (uint64 r; r < 30; ++r) {
            bytes32[] memory tree = _commitEth(r, r + 1, 0); // rounds carry rewardTotal = 0
            vm.prank(guardian);
            funding.revokeEthRoot(RUN, tree[0]);
        }
        assertEq(token.totalSupply(), 0, "capital minted for rounds that paid no compute");
        assertEq(funding.runOf(RUN).capitalPool, 0);
    }

    /// F5: a revoked ETH root still counted as committed: after a cancel the backer's refund
    /// missed the revoked root's ETH, which then stayed locked for ever.
    function test_attack_revokedEthRootIsRefundedAfterCancel() public {
        _deposit(alice, 1 ether);
        bytes32[] memory tree = _commitEth(0, 0.6 ether, 0);
        vm.prank(guardian);
        funding.revokeEthRoot(RUN, tree[0]);
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
        uint256 before = alice.balance;
        funding.refund(RUN, alice);
        assertEq(alice.balance - before, 1 ether, "the revoked root's ETH was not refunded");
        assertEq(address(funding).balance, 0, "ETH left locked");
    }
}
