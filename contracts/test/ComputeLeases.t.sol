// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {IComputeLeases} from "../src/interfaces/IComputeLeases.sol";
import {IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Shared set-up: the deployed system, DEFAULT_RUN at genesis, an organiser with ETH.
abstract contract LeaseBase is ColocoTest {
    uint128 internal constant PRICE = 0.1 ether;
    uint64 internal constant ROUNDS = 10;

    address internal organiser = makeAddr("organiser");
    address internal leased = makeAddr("leased-node");

    function setUp() public virtual override {
        super.setUp();
        vm.deal(organiser, 1000 ether);
        vm.prank(committer);
        ledger.commitRound(DEFAULT_RUN, 0, bytes32(0), keccak256("genesis"), 0, bytes32(0), 0);
    }

    function _open(address node_, uint128 price, uint64 rounds) internal returns (bytes32) {
        vm.prank(organiser);
        return leases.openLease{value: uint256(price) * rounds}(DEFAULT_RUN, node_, price, rounds);
    }

    function _leaf(bytes32 id, uint256 cumulative, uint64 through) internal view returns (bytes32) {
        return
            keccak256(bytes.concat(keccak256(abi.encode(address(leases), id, cumulative, through))));
    }

    /// @dev Commits the next round of DEFAULT_RUN with a rewards tree holding one reward leaf and
    /// the lease leaf (`id`, `cumulative`, through the committed round); returns the tree.
    function _commitLeaf(bytes32 id, uint256 cumulative) internal returns (bytes32[] memory tree) {
        uint64 round = ledger.lastRound(DEFAULT_RUN) + 1;
        return _commitLeafAt(round, id, cumulative, round);
    }

    function _commitLeafAt(uint64 round, bytes32 id, uint256 cumulative, uint64 through)
        internal
        returns (bytes32[] memory tree)
    {
        bytes32[] memory leaves = new bytes32[](2);
        leaves[0] = StandardMerkleTree.leaf(payout, round);
        leaves[1] = _leaf(id, cumulative, through);
        tree = StandardMerkleTree.build(leaves);
        vm.prank(committer);
        ledger.commitRound(
            DEFAULT_RUN, round, tree[0], keccak256(abi.encode(round)), 1, bytes32(0), 0
        );
    }

    function _final() internal {
        vm.warp(block.timestamp + DISPUTE);
    }

    function _proof(bytes32[] memory tree, bytes32 id, uint256 cumulative, uint64 through)
        internal
        view
        returns (bytes32[] memory)
    {
        return StandardMerkleTree.proof(tree, _leaf(id, cumulative, through));
    }

    function _claim(bytes32[] memory tree, bytes32 id, uint256 cumulative, uint64 through)
        internal
        returns (uint256)
    {
        return leases.claim(id, cumulative, through, tree[0], _proof(tree, id, cumulative, through));
    }

    function _refund(bytes32[] memory tree, bytes32 id, uint256 cumulative, uint64 through)
        internal
        returns (uint256)
    {
        return leases.refund(
            id, cumulative, through, tree[0], _proof(tree, id, cumulative, through)
        );
    }
}

contract ComputeLeasesTest is LeaseBase {
    function test_open_escrowsPriceTimesRoundsFromTheNextRound() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        IComputeLeases.Lease memory l = leases.leaseOf(id);
        assertEq(l.organiser, organiser);
        assertEq(l.node, leased);
        assertEq(l.startRound, 1);
        assertEq(l.endRound, ROUNDS);
        assertEq(l.weiPerRound, PRICE);
        assertEq(l.runId, DEFAULT_RUN);
        assertEq(address(leases).balance, uint256(PRICE) * ROUNDS);
        assertEq(leases.leaseCount(), 1);
    }

    function test_open_beforeGenesisStartsAtRoundOne() public {
        vm.prank(organiser);
        bytes32 id = leases.openLease{value: PRICE}(bytes32(uint256(77)), leased, PRICE, 1);
        assertEq(leases.leaseOf(id).startRound, 1);
    }

    function test_open_afterRoundsStartsAfterTheLastCommitted() public {
        _commitLeaf(bytes32(0), 0);
        _commitLeaf(bytes32(0), 0);
        bytes32 id = _open(leased, PRICE, 3);
        assertEq(leases.leaseOf(id).startRound, 3);
        assertEq(leases.leaseOf(id).endRound, 5);
    }

    function test_open_refusesBadTerms() public {
        vm.startPrank(organiser);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.InvalidLease.selector, address(0), PRICE, 1)
        );
        leases.openLease{value: PRICE}(DEFAULT_RUN, address(0), PRICE, 1);
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.InvalidLease.selector, leased, 0, 1));
        leases.openLease(DEFAULT_RUN, leased, 0, 1);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.InvalidLease.selector, leased, PRICE, 0)
        );
        leases.openLease(DEFAULT_RUN, leased, PRICE, 0);
        uint64 tooLong = leases.MAX_LEASE_ROUNDS() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.InvalidLease.selector, leased, 1, tooLong)
        );
        leases.openLease{value: tooLong}(DEFAULT_RUN, leased, 1, tooLong);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.WrongEscrow.selector, PRICE, 2 * PRICE)
        );
        leases.openLease{value: PRICE}(DEFAULT_RUN, leased, PRICE, 2);
        vm.stopPrank();
    }

    function test_open_distinctIdsForEqualTerms() public {
        bytes32 a = _open(leased, PRICE, ROUNDS);
        bytes32 b = _open(leased, PRICE, ROUNDS);
        assertTrue(a != b);
    }

    function test_claim_paysEarnedRoundsToTheNode() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        _commitLeaf(id, PRICE);
        bytes32[] memory tree = _commitLeaf(id, 2 * PRICE);
        _final();
        vm.prank(stranger); // anyone submits; the node is paid
        assertEq(_claim(tree, id, 2 * PRICE, 2), 2 * PRICE);
        assertEq(leased.balance, 2 * PRICE);
        assertEq(leases.leaseOf(id).paid, 2 * PRICE);
    }

    function test_claim_isCumulative() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory first = _commitLeaf(id, PRICE);
        _final();
        _claim(first, id, PRICE, 1);
        bytes32[] memory second = _commitLeaf(id, 2 * PRICE);
        _final();
        assertEq(_claim(second, id, 2 * PRICE, 2), PRICE);
        assertEq(leased.balance, 2 * PRICE);
    }

    function test_claim_refusesPendingRoot() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        IContributionLedger.RootInfo memory info = ledger.rootInfo(tree[0]);
        vm.expectRevert(
            abi.encodeWithSelector(
                IContributionLedger.RootPending.selector, tree[0], info.finalizedAt
            )
        );
        _claim(tree, id, PRICE, 1);
    }

    function test_claim_refusesUnknownLease() public {
        bytes32 id = keccak256("nope");
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.UnknownLease.selector, id));
        _claim(tree, id, PRICE, 1);
    }

    function test_claim_refusesWrongProof() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        bytes32[] memory proof = _proof(tree, id, PRICE, 1);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.InvalidProof.selector, id, PRICE + 1, 1)
        );
        leases.claim(id, PRICE + 1, 1, tree[0], proof);
    }

    function test_refund_afterTheWindowReturnsTheUnearnedInOneTransaction() public {
        bytes32 id = _open(leased, PRICE, 3);
        _commitLeaf(id, PRICE); // round 1 done
        _commitLeaf(id, PRICE); // round 2: the node left
        bytes32[] memory tree = _commitLeaf(id, PRICE); // round 3: the last of the window
        _final();
        uint256 before = organiser.balance;
        vm.prank(stranger);
        assertEq(_refund(tree, id, PRICE, 3), 2 * PRICE);
        assertEq(organiser.balance - before, 2 * PRICE);
        IComputeLeases.Lease memory l = leases.leaseOf(id);
        assertTrue(l.settled);
        assertEq(l.refunded, 2 * PRICE);
        // the node still claims exactly its one round, and nothing more
        assertEq(_claim(tree, id, PRICE, 3), PRICE);
        assertEq(address(leases).balance, 0);
    }

    function test_refund_runStoppedEarly_organiserSettlesThroughTheLastCommittedRound() public {
        bytes32 id = _open(leased, PRICE, 5);
        _commitLeaf(id, PRICE); // round 1 done
        bytes32[] memory tree = _commitLeaf(id, 2 * PRICE); // round 2: the run stops here
        _final();
        // before the window's end: not anyone's to settle, and never a stale round
        vm.prank(stranger);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseNotEnded.selector, id, uint64(5), uint64(2))
        );
        leases.refund(id, 2 * PRICE, 2, tree[0], _proof(tree, id, 2 * PRICE, 2));
        uint256 before = organiser.balance;
        vm.prank(organiser);
        assertEq(_refund(tree, id, 2 * PRICE, 2), 3 * PRICE); // one transaction
        assertEq(organiser.balance - before, 3 * PRICE);
        assertTrue(leases.leaseOf(id).settled);
        // the node is paid exactly its two completed rounds, and nothing more ever
        assertEq(_claim(tree, id, 2 * PRICE, 2), 2 * PRICE);
        assertEq(address(leases).balance, 0);
        bytes32[] memory later = _commitLeaf(id, 3 * PRICE); // a round committed after all
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseOverpaid.selector, id, 3 * PRICE, 2 * PRICE)
        );
        _claim(later, id, 3 * PRICE, 3);
    }

    function test_refund_earlyNeedsTheRunsLastCommittedRound() public {
        bytes32 id = _open(leased, PRICE, 5);
        bytes32[] memory tree = _commitLeaf(id, PRICE); // round 1
        _commitLeaf(id, 2 * PRICE); // round 2 committed: a leaf through 1 leaves it out
        _final();
        vm.prank(organiser);
        vm.expectRevert(
            abi.encodeWithSelector(
                IComputeLeases.RunNotStopped.selector, DEFAULT_RUN, uint64(2), uint64(1)
            )
        );
        leases.refund(id, PRICE, 1, tree[0], _proof(tree, id, PRICE, 1));
    }

    function test_refund_whenAllEarnedReturnsNothingAndSettles() public {
        bytes32 id = _open(leased, PRICE, 1);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        assertEq(_refund(tree, id, PRICE, 1), 0);
        assertTrue(leases.leaseOf(id).settled);
        assertEq(_claim(tree, id, PRICE, 1), PRICE);
    }

    function test_refund_neverPaused() public {
        bytes32 id = _open(leased, PRICE, 1);
        bytes32[] memory tree = _commitLeaf(id, 0);
        _final();
        vm.prank(guardian);
        leases.pause();
        assertEq(_refund(tree, id, 0, 1), PRICE);
    }

    function test_pause_stopsOpenAndClaim_guardianOrGovernance_unpauseGovernanceOnly() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        leases.pause();
        vm.prank(guardian);
        leases.pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _claim(tree, id, PRICE, 1);
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _open(leased, PRICE, 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, guardian, bytes32(0)
            )
        );
        vm.prank(guardian);
        leases.unpause();
        vm.prank(address(timelock));
        leases.unpause();
        assertEq(_claim(tree, id, PRICE, 1), PRICE);
        vm.prank(address(timelock));
        leases.pause(); // governance may pause too
        assertTrue(leases.paused());
    }

    function test_capOf_growsWithCommittedRoundsOfTheWindowOnly() public {
        _commitLeaf(bytes32(0), 0); // round 1, before the lease
        bytes32 id = _open(leased, PRICE, 3); // rounds 2..4
        assertEq(leases.capOf(id, 1), 0);
        assertEq(leases.capOf(id, 2), PRICE);
        assertEq(leases.capOf(id, 4), 3 * PRICE);
        assertEq(leases.capOf(id, 100), 3 * PRICE);
    }

    function testFuzz_claimAndRefund_conserveTheEscrow(uint8 rounds_, uint8 worked, uint8 price)
        public
    {
        uint64 rounds = uint64(bound(rounds_, 1, 20));
        uint64 done = uint64(bound(worked, 0, rounds));
        uint128 p = uint128(bound(price, 1, 200)) * 1e15;
        bytes32 id = _open(leased, p, rounds);
        bytes32[] memory tree;
        for (uint64 r = 1; r <= rounds; ++r) {
            tree = _commitLeaf(id, uint256(p) * (r <= done ? r : done));
        }
        _final();
        uint256 earned = uint256(p) * done;
        uint256 back = _refund(tree, id, earned, rounds);
        if (earned != 0) _claim(tree, id, earned, rounds);
        assertEq(back + leased.balance, uint256(p) * rounds);
        assertEq(leased.balance, earned);
        assertEq(address(leases).balance, 0);
    }
}
