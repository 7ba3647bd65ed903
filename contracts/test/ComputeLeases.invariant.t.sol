// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {ComputeLeases} from "../src/ComputeLeases.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {IComputeLeases} from "../src/interfaces/IComputeLeases.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Drives leases of one run through opens, rounds committed with honest and inflated lease
/// leaves (the committer overpaying), claims (honest, inflated, repeated), refunds before and
/// after the window and revoked roots. Ghosts record every wei in and out; the assertions live in
/// the invariant_ functions; counters show each path was taken.
contract LeaseHandler is Test {
    bytes32 public constant RUN = keccak256("lease-invariant");

    ComputeLeases internal immutable leases;
    ContributionLedger internal immutable ledger;
    address internal immutable committer;
    address internal immutable guardian;

    bytes32[] public ids;
    mapping(bytes32 => uint256) internal done; // rounds the node completed (honest leaf)
    bytes32[] internal tree;
    bytes32 internal root;
    uint64 internal round;
    uint256 internal inflateBy; // extra rounds the committer's second leaf claims
    bool internal revoked;

    uint256 public ghostDeposited;
    uint256 public ghostPaid;
    uint256 public ghostRefunded;
    uint256 public ghostPaidOverCap; // paid beyond price x rounds elapsed: must stay 0
    uint256 public ghostRevokedPaid; // paid against a revoked root: must stay 0
    mapping(bytes4 => uint256) public calls;

    constructor(
        ComputeLeases l,
        ContributionLedger ledger_,
        address committer_,
        address guardian_
    ) {
        leases = l;
        ledger = ledger_;
        committer = committer_;
        guardian = guardian_;
        vm.deal(address(this), 1e30);
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("genesis"), 0, bytes32(0), 0);
    }

    function open(uint256 nodeSeed, uint128 price, uint64 rounds) external {
        if (ids.length >= 8) return;
        price = uint128(bound(price, 1, 1e18));
        rounds = uint64(bound(rounds, 1, 6));
        address n = vm.addr(0xB000 + (nodeSeed % 4));
        bytes32 id = leases.openLease{value: uint256(price) * rounds}(RUN, n, price, rounds);
        ids.push(id);
        ghostDeposited += uint256(price) * rounds;
        ++calls[this.open.selector];
    }

    /// Commits the next round: each lease's node in its window works unless `skipMask` says it
    /// left; the tree holds the honest leaf and, if `inflate`, an inflated one for every lease.
    function commit(uint256 skipMask, uint8 inflate) external {
        round += 1;
        inflateBy = inflate % 3;
        uint256 n = ids.length;
        bytes32[] memory leaves = new bytes32[](1 + n * (inflateBy == 0 ? 1 : 2));
        leaves[0] = StandardMerkleTree.leaf(address(0xbeef), round);
        for (uint256 i; i < n; ++i) {
            IComputeLeases.Lease memory l = leases.leaseOf(ids[i]);
            if (round >= l.startRound && round <= l.endRound && (skipMask >> i) & 1 == 0) {
                done[ids[i]] += 1;
            }
            leaves[1 + i] = leases.leaseLeaf(ids[i], _honest(ids[i]), round);
            if (inflateBy != 0) {
                leaves[1 + n + i] = leases.leaseLeaf(ids[i], _inflated(ids[i]), round);
            }
        }
        tree = StandardMerkleTree.build(leaves);
        root = tree[0];
        revoked = false;
        vm.prank(committer);
        ledger.commitRound(RUN, round, root, keccak256(abi.encode(round)), 1, bytes32(0), 0);
        ++calls[this.commit.selector];
    }

    function revoke() external {
        if (root == bytes32(0) || revoked) return;
        if (block.timestamp >= ledger.rootInfo(root).finalizedAt) return;
        vm.prank(guardian);
        ledger.revokeRoot(root);
        revoked = true;
        ++calls[this.revoke.selector];
    }

    function wait(uint256 secs) external {
        vm.warp(block.timestamp + bound(secs, 0, 2 hours));
        ++calls[this.wait.selector];
    }

    function claim(uint256 which, bool inflated) external {
        if (ids.length == 0 || root == bytes32(0)) return;
        bytes32 id = ids[which % ids.length];
        if (inflated && inflateBy == 0) inflated = false;
        uint256 amount = inflated ? _inflated(id) : _honest(id);
        bytes32[] memory proof = StandardMerkleTree.proof(tree, leases.leaseLeaf(id, amount, round));
        IComputeLeases.Lease memory l = leases.leaseOf(id);
        uint256 cap = uint256(l.weiPerRound) * _elapsed(l);
        try leases.claim(id, amount, round, root, proof) returns (uint256 paid) {
            ghostPaid += paid;
            if (leases.leaseOf(id).paid > cap) ghostPaidOverCap += paid;
            if (revoked) ghostRevokedPaid += paid;
            ++calls[inflated ? bytes4(keccak256("claimInflated")) : this.claim.selector];
        } catch {
            ++calls[bytes4(keccak256("claimRefused"))];
        }
    }

    function refund(uint256 which) external {
        if (ids.length == 0 || root == bytes32(0)) return;
        bytes32 id = ids[which % ids.length];
        uint256 amount = _honest(id);
        bytes32[] memory proof = StandardMerkleTree.proof(tree, leases.leaseLeaf(id, amount, round));
        try leases.refund(id, amount, round, root, proof) returns (uint256 back) {
            ghostRefunded += back;
            if (revoked) ghostRevokedPaid += back;
            ++calls[this.refund.selector];
        } catch {
            ++calls[bytes4(keccak256("refundRefused"))];
        }
    }

    function count() external view returns (uint256) {
        return ids.length;
    }

    function _honest(bytes32 id) internal view returns (uint256) {
        return leases.leaseOf(id).weiPerRound * done[id];
    }

    function _inflated(bytes32 id) internal view returns (uint256) {
        return leases.leaseOf(id).weiPerRound * (done[id] + inflateBy);
    }

    function _elapsed(IComputeLeases.Lease memory l) internal view returns (uint256) {
        if (round < l.startRound) return 0;
        return (round < l.endRound ? round : l.endRound) - l.startRound + 1;
    }

    /// The handler is the organiser: refunds come here.
    receive() external payable {}
}

contract ComputeLeasesInvariantTest is ColocoTest {
    LeaseHandler internal handler;

    function setUp() public override {
        super.setUp();
        handler = new LeaseHandler(leases, ledger, committer, guardian);
        targetContract(address(handler));
    }

    /// Every wei escrowed is paid to a node, refunded, or still held.
    function invariant_escrowIsConserved() public view {
        assertEq(
            handler.ghostPaid() + handler.ghostRefunded() + address(leases).balance,
            handler.ghostDeposited()
        );
    }

    /// No lease was ever paid beyond its price times its rounds elapsed, nor from a revoked root.
    function invariant_noLeasePaidBeyondItsCap() public view {
        assertEq(handler.ghostPaidOverCap(), 0);
        assertEq(handler.ghostRevokedPaid(), 0);
        for (uint256 i; i < handler.count(); ++i) {
            IComputeLeases.Lease memory l = leases.leaseOf(handler.ids(i));
            uint256 escrow = uint256(l.weiPerRound) * (l.endRound - l.startRound + 1);
            assertLe(uint256(l.paid) + l.refunded, escrow);
        }
    }
}
