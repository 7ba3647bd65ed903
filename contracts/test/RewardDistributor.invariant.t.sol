// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Settles rounds (cumulative amounts only grow) with their budget, sometimes publishes a bad
/// root paying a thief far beyond the budget, revokes some roots, lets time pass, and claims at
/// random against any root (stale, pending, revoked), sometimes inflated or with another
/// account's proof. Ghosts record every payment that should never have happened; the assertions
/// live in the invariant_* functions, so a bad payment cannot be swallowed by a reverted call.
contract ClaimHandler is Test {
    uint256 internal constant N = 5;
    uint256 internal constant THIEF = N; // index of the thief in bad trees

    ContributionLedger internal immutable ledger;
    RewardDistributor internal immutable distributor;
    address internal immutable committer;
    address internal immutable guardian;
    bytes32 internal constant RUN = keccak256("invariant-run");

    address[N + 1] public accounts;
    uint256[N] internal _latest; // latest honest cumulative amounts
    bytes32[][] internal _trees;
    uint256[N + 1][] internal _amounts;

    uint256 public ghostPaid;
    uint256 public ghostInflatedPaid;
    uint256 public ghostRevokedPaid;
    uint256 public ghostPendingPaid;
    uint256 public ghostThiefPaid;
    mapping(bytes32 => uint256) public calls;
    uint64 internal round;

    constructor(
        ContributionLedger ledger_,
        RewardDistributor distributor_,
        address committer_,
        address guardian_
    ) {
        ledger = ledger_;
        distributor = distributor_;
        committer = committer_;
        guardian = guardian_;
        for (uint256 i; i <= N; ++i) {
            accounts[i] = vm.addr(0xA000 + i);
        }
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("genesis"), 0, bytes32(0), 0);
    }

    function _publish(uint256[N + 1] memory amounts, uint256 budget) internal {
        bytes32[] memory leaves = new bytes32[](N + 1);
        for (uint256 i; i <= N; ++i) {
            leaves[i] = StandardMerkleTree.leaf(accounts[i], amounts[i]);
        }
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        ++round;
        vm.prank(committer);
        ledger.commitRound(RUN, round, tree[0], keccak256(abi.encode(round)), 1, bytes32(0), budget);
        _trees.push(tree);
        _amounts.push(amounts);
    }

    function settleRound(uint64[N] memory rewards) external {
        uint256[N + 1] memory amounts;
        uint256 budget;
        for (uint256 i; i < N; ++i) {
            uint256 r = bound(rewards[i], 0, 1000e18);
            _latest[i] += r;
            budget += r;
            amounts[i] = _latest[i];
        }
        _publish(amounts, budget);
        ++calls["settleRound"];
    }

    /// A malicious committer: the thief is owed 1e30 under a root that carries a small budget.
    function settleBadRound(uint256 budget) external {
        uint256[N + 1] memory amounts;
        for (uint256 i; i < N; ++i) {
            amounts[i] = _latest[i];
        }
        amounts[THIEF] = 1e30;
        _publish(amounts, bound(budget, 0, 1000e18));
        ++calls["settleBadRound"];
    }

    function revoke(uint256 which) external {
        if (_trees.length == 0) return;
        bytes32 root = _trees[which % _trees.length][0];
        vm.prank(guardian);
        try ledger.revokeRoot(root) {
            ++calls["revoke"];
        } catch {
            ++calls["revoke_refused"];
        }
    }

    function wait(uint256 seconds_) external {
        vm.warp(block.timestamp + bound(seconds_, 1, 2 hours));
        ++calls["wait"];
    }

    function claim(uint256 who, uint256 which, uint256 mode) external {
        if (_trees.length == 0) return;
        uint256 t = which % _trees.length;
        uint256 i = who % (N + 1);
        address account = accounts[i];
        uint256 owed = _amounts[t][i];
        uint256 amount = owed;
        bytes32[] memory proof =
            StandardMerkleTree.proof(_trees[t], StandardMerkleTree.leaf(account, owed));
        if (mode % 5 == 0) {
            amount = owed + bound(mode, 1, 1e18); // inflated
        } else if (mode % 5 == 1) {
            account = accounts[(i + 1) % (N + 1)]; // another account's proof
        }
        bytes32 root = _trees[t][0];
        ContributionLedger.RootInfo memory info = ledger.rootInfo(root);
        try distributor.claim(account, amount, proof) returns (uint256 paid) {
            ghostPaid += paid;
            if (amount != owed || account != accounts[i]) ghostInflatedPaid += paid;
            if (info.revoked) ghostRevokedPaid += paid;
            if (block.timestamp < info.finalizedAt) ghostPendingPaid += paid;
            if (i == THIEF) ghostThiefPaid += paid;
            ++calls["claim_paid"];
        } catch {
            ++calls["claim_refused"];
        }
    }

    function trees() external view returns (uint256) {
        return _trees.length;
    }

    function account(uint256 i) external view returns (address) {
        return accounts[i];
    }
}

contract RewardDistributorInvariantTest is ColocoTest {
    ClaimHandler internal handler;

    function setUp() public override {
        super.setUp();
        vm.prank(address(timelock));
        config.setRewardPerRound(1_000_000e18);
        handler = new ClaimHandler(ledger, distributor, committer, guardian);
        targetContract(address(handler));
    }

    /// Each run must have exercised real claims, or the invariants prove nothing.
    function afterInvariant() external view {
        assertGt(handler.calls("settleRound"), 0, "no round settled");
        assertGt(handler.calls("claim_paid") + handler.calls("claim_refused"), 0, "no claim");
    }

    /// No inflated amount and no other account's proof was ever paid.
    function invariant_inflatedPaidIsZero() public view {
        assertEq(handler.ghostInflatedPaid(), 0);
    }

    /// A revoked or pending root never paid.
    function invariant_revokedAndPendingRootsNeverPay() public view {
        assertEq(handler.ghostRevokedPaid(), 0);
        assertEq(handler.ghostPendingPaid(), 0);
    }

    /// Total claimed never exceeds total committed budget; the thief gets at most the budget.
    function invariant_claimedWithinBudget() public view {
        assertLe(distributor.totalClaimed(), ledger.totalBudget());
        assertLe(handler.ghostThiefPaid(), ledger.totalBudget());
    }

    /// Every token in existence was paid by a claim.
    function invariant_supplyEqualsSumOfClaims() public view {
        uint256 sumClaimed;
        for (uint256 i; i <= 5; ++i) {
            sumClaimed += distributor.claimed(handler.account(i));
        }
        assertEq(token.totalSupply(), handler.ghostPaid());
        assertEq(token.totalSupply(), sumClaimed);
        assertEq(token.totalSupply(), distributor.totalClaimed());
    }

    /// Votes follow balances: every holder was auto-delegated to itself.
    function invariant_holdersSelfDelegated() public view {
        for (uint256 i; i <= 5; ++i) {
            address a = handler.account(i);
            if (token.balanceOf(a) > 0) assertEq(token.getVotes(a), token.balanceOf(a));
        }
    }
}
