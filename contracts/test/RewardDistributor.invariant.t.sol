// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ModelShareToken} from "../src/ModelShareToken.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Settles rounds (cumulative amounts only grow), publishes their root, and claims at random,
/// sometimes with stale or inflated amounts; ghosts record what was committed and paid.
contract ClaimHandler is Test {
    uint256 internal constant N = 5;

    ContributionLedger internal immutable ledger;
    RewardDistributor internal immutable distributor;
    address internal immutable committer;
    bytes32 internal constant RUN = keccak256("invariant-run");

    address[N] public accounts;
    uint256[N] public committed; // latest cumulative amounts in the published tree
    mapping(address => uint256) public ghostMaxCommitted;
    uint256 public ghostPaid;
    uint256 public ghostClaims;
    uint64 internal round;
    bytes32[] internal tree;

    constructor(ContributionLedger ledger_, RewardDistributor distributor_, address committer_) {
        ledger = ledger_;
        distributor = distributor_;
        committer = committer_;
        for (uint256 i; i < N; ++i) {
            accounts[i] = vm.addr(0xA000 + i);
        }
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("genesis"), 0, bytes32(0));
    }

    function settleRound(uint64[N] memory rewards) external {
        bytes32[] memory leaves = new bytes32[](N);
        for (uint256 i; i < N; ++i) {
            committed[i] += bound(rewards[i], 0, 1000e18);
            if (committed[i] > ghostMaxCommitted[accounts[i]]) {
                ghostMaxCommitted[accounts[i]] = committed[i];
            }
            leaves[i] = StandardMerkleTree.leaf(accounts[i], committed[i]);
        }
        tree = StandardMerkleTree.build(leaves);
        ++round;
        vm.prank(committer);
        ledger.commitRound(RUN, round, tree[0], keccak256(abi.encode(round)), 1, bytes32(0));
        vm.roll(block.number + 1);
    }

    function claim(uint256 who, uint256 inflate) external {
        if (tree.length == 0) return;
        uint256 i = who % N;
        uint256 amount = committed[i];
        bytes32[] memory proof =
            StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(accounts[i], amount));
        // Occasionally lie about the amount: the proof must then fail.
        uint256 claimedAmount = amount + (inflate % 4 == 0 ? bound(inflate, 1, 1e18) : 0);
        uint256 before = distributor.claimed(accounts[i]);
        try distributor.claim(accounts[i], claimedAmount, proof) returns (uint256 paid) {
            ghostPaid += paid;
            ++ghostClaims;
            assertEq(claimedAmount, amount, "an inflated claim was paid");
            assertEq(paid, amount - before);
        } catch {}
    }

    function account(uint256 i) external view returns (address) {
        return accounts[i];
    }
}

contract RewardDistributorInvariantTest is ColocoTest {
    ClaimHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new ClaimHandler(ledger, distributor, committer);
        targetContract(address(handler));
    }

    /// Each run must have exercised real claims, or the invariants above prove nothing.
    function afterInvariant() external view {
        assertGt(handler.ghostClaims(), 0, "no claim succeeded in this run");
    }

    /// Every token in existence was paid by a claim.
    function invariant_supplyEqualsSumOfClaims() public view {
        uint256 sumClaimed;
        for (uint256 i; i < 5; ++i) {
            sumClaimed += distributor.claimed(handler.account(i));
        }
        assertEq(token.totalSupply(), handler.ghostPaid());
        assertEq(token.totalSupply(), sumClaimed);
    }

    /// No account ever holds (or has claimed) more than its highest committed cumulative amount.
    function invariant_noAccountExceedsCommitted() public view {
        for (uint256 i; i < 5; ++i) {
            address a = handler.account(i);
            assertLe(token.balanceOf(a), handler.ghostMaxCommitted(a));
            assertEq(token.balanceOf(a), distributor.claimed(a));
        }
    }

    /// Votes follow balances: every holder was auto-delegated to itself.
    function invariant_holdersSelfDelegated() public view {
        for (uint256 i; i < 5; ++i) {
            address a = handler.account(i);
            if (token.balanceOf(a) > 0) assertEq(token.getVotes(a), token.balanceOf(a));
        }
    }
}
