// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IComputeLeases} from "../src/interfaces/IComputeLeases.sol";
import {IContributionLedger} from "../src/interfaces/IContributionLedger.sol";
import {IRewardDistributor} from "../src/interfaces/IRewardDistributor.sol";
import {ComputeLeases} from "../src/ComputeLeases.sol";
import {LeaseBase} from "./ComputeLeases.t.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// A node contract that re-enters `claim` (or `refund`) when paid.
contract ReenteringNode {
    ComputeLeases internal immutable leases;
    bytes internal again;
    bytes public reason;

    constructor(ComputeLeases leases_) {
        leases = leases_;
    }

    function arm(bytes calldata call_) external {
        again = call_;
    }

    receive() external payable {
        if (again.length == 0) return;
        bytes memory call_ = again;
        delete again;
        (bool ok, bytes memory ret) = address(leases).call(call_);
        if (!ok) reason = ret;
    }
}

/// Each attack on the lease escrow, with the bound that stops it.
contract ComputeLeasesAttacksTest is LeaseBase {
    function test_attack_committerOverpaysBeyondRoundsElapsed() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        // round 1 committed: a leaf paying 2 rounds is beyond price x rounds elapsed
        bytes32[] memory tree = _commitLeaf(id, 2 * PRICE);
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseOverpaid.selector, id, 2 * PRICE, PRICE)
        );
        _claim(tree, id, 2 * PRICE, 1);
    }

    function test_attack_committerOverpaysBeyondTheEscrow() public {
        bytes32 id = _open(leased, PRICE, 2);
        _commitLeaf(id, PRICE);
        _commitLeaf(id, 2 * PRICE);
        bytes32[] memory tree = _commitLeaf(id, 3 * PRICE); // round 3 is past the window
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseOverpaid.selector, id, 3 * PRICE, 2 * PRICE)
        );
        _claim(tree, id, 3 * PRICE, 3);
    }

    function test_attack_committerClaimsARoundNotYetCommitted() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        // the leaf says "through round 5" in the root of round 1
        bytes32[] memory tree = _commitLeafAt(1, id, 5 * PRICE, 5);
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.RoundNotCommitted.selector, DEFAULT_RUN, 5)
        );
        _claim(tree, id, 5 * PRICE, 5);
    }

    function test_attack_refundBeforeTheWindowEnds() public {
        bytes32 id = _open(leased, PRICE, 3);
        bytes32[] memory tree = _commitLeaf(id, 0);
        _final();
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.LeaseNotEnded.selector, id, 3, 1));
        _refund(tree, id, 0, 1);
    }

    function test_attack_refundTwice() public {
        bytes32 id = _open(leased, PRICE, 1);
        bytes32[] memory tree = _commitLeaf(id, 0);
        _final();
        _refund(tree, id, 0, 1);
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.LeaseSettled.selector, id));
        _refund(tree, id, 0, 1);
    }

    function test_attack_doubleClaim() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        _claim(tree, id, PRICE, 1);
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.NothingToClaim.selector, id, PRICE, PRICE)
        );
        _claim(tree, id, PRICE, 1);
        assertEq(leased.balance, PRICE);
    }

    function test_attack_claimAfterRefundBeyondEarned() public {
        bytes32 id = _open(leased, PRICE, 2);
        _commitLeaf(id, PRICE);
        bytes32[] memory honest = _commitLeaf(id, PRICE);
        _final();
        _refund(honest, id, PRICE, 2);
        // a later root raising the lease to its full escrow pays nothing beyond what it earned
        bytes32[] memory later = _commitLeaf(id, 2 * PRICE);
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseOverpaid.selector, id, 2 * PRICE, PRICE)
        );
        _claim(later, id, 2 * PRICE, 3);
    }

    function test_attack_revokedRootPaysNothing() public {
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        vm.prank(guardian);
        ledger.revokeRoot(tree[0]);
        _final();
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, tree[0]));
        _claim(tree, id, PRICE, 1);
        vm.expectRevert(abi.encodeWithSelector(IContributionLedger.RootIsRevoked.selector, tree[0]));
        _refund(tree, id, PRICE, 1);
    }

    function test_attack_oneLeaseCannotDrainAnother() public {
        bytes32 small = _open(leased, PRICE, 1);
        _open(stranger, 100 * PRICE, 1); // a big escrow beside it
        bytes32[] memory tree = _commitLeaf(small, 100 * PRICE);
        _final();
        vm.expectRevert(
            abi.encodeWithSelector(IComputeLeases.LeaseOverpaid.selector, small, 100 * PRICE, PRICE)
        );
        _claim(tree, small, 100 * PRICE, 1);
    }

    function test_attack_leaseLeafIsNoRewardLeafAndBack() public {
        // a reward leaf (account, amount) cannot be claimed as a lease, nor a lease leaf as a
        // reward: the encodings differ in length (two words vs four)
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        bytes32[] memory rewardProof =
            StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(payout, 1));
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.InvalidProof.selector, id, 1, 0));
        leases.claim(id, 1, 0, tree[0], rewardProof);
        bytes32[] memory leaseProof = _proof(tree, id, PRICE, 1);
        vm.expectRevert(
            abi.encodeWithSelector(IRewardDistributor.InvalidProof.selector, leased, PRICE)
        );
        distributor.claim(leased, PRICE, leaseProof);
    }

    function test_attack_leafOfAnotherLeasesContract() public {
        ComputeLeases twin = new ComputeLeases(ledger, address(timelock), guardian);
        bytes32 id = _open(leased, PRICE, ROUNDS);
        bytes32[] memory leaves = new bytes32[](1);
        leaves[0] =
            keccak256(bytes.concat(keccak256(abi.encode(address(twin), id, PRICE, uint64(1)))));
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        vm.prank(committer);
        ledger.commitRound(DEFAULT_RUN, 1, tree[0], keccak256("r1"), 1, bytes32(0), 0);
        _final();
        vm.expectRevert(abi.encodeWithSelector(IComputeLeases.InvalidProof.selector, id, PRICE, 1));
        leases.claim(id, PRICE, 1, tree[0], new bytes32[](0));
    }

    function test_attack_reentrantClaimFindsNothingMore() public {
        ReenteringNode evil = new ReenteringNode(leases);
        bytes32 id = _open(address(evil), PRICE, ROUNDS);
        bytes32[] memory tree = _commitLeaf(id, PRICE);
        _final();
        bytes32[] memory proof = _proof(tree, id, PRICE, 1);
        evil.arm(abi.encodeCall(ComputeLeases.claim, (id, PRICE, 1, tree[0], proof)));
        leases.claim(id, PRICE, 1, tree[0], proof);
        assertEq(address(evil).balance, PRICE);
        assertEq(
            evil.reason(),
            abi.encodeWithSelector(IComputeLeases.NothingToClaim.selector, id, PRICE, PRICE)
        );
    }

    function test_attack_reentrantRefundByTheOrganiser() public {
        ReenteringNode evil = new ReenteringNode(leases);
        vm.deal(address(evil), PRICE);
        vm.prank(address(evil));
        bytes32 id = leases.openLease{value: PRICE}(DEFAULT_RUN, leased, PRICE, 1);
        bytes32[] memory tree = _commitLeaf(id, 0);
        _final();
        bytes32[] memory proof = _proof(tree, id, 0, 1);
        evil.arm(abi.encodeCall(ComputeLeases.refund, (id, 0, 1, tree[0], proof)));
        leases.refund(id, 0, 1, tree[0], proof);
        assertEq(address(evil).balance, PRICE);
        assertEq(evil.reason(), abi.encodeWithSelector(IComputeLeases.LeaseSettled.selector, id));
    }

    function test_attack_nodeRefusingEthCannotBlockTheRefund() public {
        // the refund pays only the organiser: a node that reverts on receipt delays only itself
        bytes32 id = _open(address(this), PRICE, 1); // this test contract has no receive()
        bytes32[] memory tree = _commitLeaf(id, PRICE / 2);
        _final();
        uint256 before = organiser.balance;
        _refund(tree, id, PRICE / 2, 1);
        assertEq(organiser.balance - before, PRICE / 2);
        vm.expectRevert(
            abi.encodeWithSelector(
                IComputeLeases.EthTransferFailed.selector, address(this), PRICE / 2
            )
        );
        _claim(tree, id, PRICE / 2, 1);
    }
}
