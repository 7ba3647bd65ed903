// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Test} from "forge-std/Test.sol";
import {ContributionLedger} from "../src/ContributionLedger.sol";
import {ModelShareToken} from "../src/ModelShareToken.sol";
import {RunFunding} from "../src/RunFunding.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Drives one run through deposits, ETH roots (some revoked), honest and inflated claims, other
/// accounts' proofs, cancellation, refunds and vested claims. Ghosts record every wei in and out;
/// assertions live in the invariant_ functions; counters show each path was really taken.
contract FundingHandler is Test {
    uint256 internal constant N = 4;
    bytes32 public constant RUN = keccak256("funding-invariant");

    RunFunding internal immutable funding;
    ContributionLedger internal immutable ledger;
    address internal immutable committer;
    address internal immutable governance;

    address[N] public actors;
    uint256[N] internal allocated; // cumulative wei in the latest root
    bytes32[] internal tree;
    bytes32 internal latestRoot;
    uint64 internal round;
    bool internal ledgerStarted;

    uint256 public ghostDeposited;
    uint256 public ghostPaidCompute;
    uint256 public ghostRefunded;
    uint256 public ghostInflatedPaid; // paid for a leaf that is not in the root: must stay 0
    uint256 public ghostRevokedPaid; // paid against a revoked root: must stay 0
    uint256 public ghostMinted;
    uint256 public ghostAccrued; // capital minted into escrow
    uint256 public ghostRevokedAccrued; // capital accrued for a revoked root: must stay 0
    mapping(bytes32 => bool) internal revokedRoot;
    mapping(bytes4 => uint256) public calls;

    constructor(RunFunding f, ContributionLedger l, address committer_, address governance_) {
        funding = f;
        ledger = l;
        committer = committer_;
        governance = governance_;
        for (uint256 i; i < N; ++i) {
            actors[i] = vm.addr(0xF000 + i);
            vm.deal(actors[i], 1000 ether);
        }
        vm.prank(committer);
        funding.openRun(RUN, uint64(block.timestamp + 1 days), 5 ether);
        vm.prank(actors[0]); // a first deposit, so every run has ETH to move
        funding.deposit{value: 10 ether}(RUN);
        ghostDeposited = 10 ether;
    }

    function deposit(uint256 who, uint256 amount) external {
        address a = actors[who % N];
        amount = bound(amount, 1, 20 ether);
        vm.prank(a);
        try funding.deposit{value: amount}(RUN) {
            ghostDeposited += amount;
            ++calls[this.deposit.selector];
        } catch {}
    }

    function commitRoot(uint256 seed) external {
        vm.startPrank(committer);
        // every other round carries the compute budget (the capital pool's bound)
        uint256 budget = round % 2 == 0 ? 80e18 : 0;
        bytes32 rewardsRoot = budget == 0 ? bytes32(0) : keccak256(abi.encode("rewards", round));
        ledger.commitRound(
            RUN, round, rewardsRoot, keccak256(abi.encode(round)), 1, bytes32(0), budget
        );
        RunFunding.Run memory run = funding.runOf(RUN);
        uint256 room = run.totalDeposited - run.ethCommitted;
        if (room > run.ethPerRound) room = run.ethPerRound;
        bytes32[] memory leaves = new bytes32[](N);
        uint256 total = run.ethCommitted;
        for (uint256 i; i < N; ++i) {
            uint256 add = room == 0 ? 0 : uint256(keccak256(abi.encode(seed, i))) % (room / N + 1);
            allocated[i] += add;
            total += add;
            if (i == 0 && room != 0) {
                allocated[0] += 1; // a root always adds ETH
                total += 1;
            }
            leaves[i] = StandardMerkleTree.leaf(actors[i], allocated[i]);
        }
        bytes32[] memory t = StandardMerkleTree.build(leaves);
        try funding.commitEthRoot(RUN, round, t[0], total) {
            tree = t;
            latestRoot = t[0];
            ++calls[this.commitRoot.selector];
        } catch {}
        ++round;
        vm.stopPrank();
    }

    function revokeLatest() external {
        if (latestRoot == bytes32(0)) return;
        vm.prank(governance);
        try funding.revokeEthRoot(RUN, latestRoot) {
            revokedRoot[latestRoot] = true;
            ++calls[this.revokeLatest.selector];
        } catch {}
    }

    /// Claims with the right amount, an inflated one, or another account's proof.
    function claimEth(uint256 who, uint256 mode) external {
        if (tree.length == 0) return;
        uint256 i = who % N;
        uint256 j = mode % 3 == 2 ? (i + 1) % N : i; // mode 2: someone else's proof
        uint256 amount = allocated[j] + (mode % 3 == 1 ? 1 : 0); // mode 1: inflated
        bytes32[] memory proof =
            StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(actors[j], allocated[j]));
        uint256 before = actors[i].balance;
        try funding.claimEth(RUN, actors[i], amount, latestRoot, proof) returns (uint256 paid) {
            ghostPaidCompute += paid;
            if (mode % 3 != 0 && i != j || mode % 3 == 1) ghostInflatedPaid += paid;
            if (revokedRoot[latestRoot]) ghostRevokedPaid += paid;
            if (actors[i].balance - before != paid) ghostInflatedPaid += 1;
            ++calls[this.claimEth.selector];
        } catch {}
    }

    function accrue() external {
        if (latestRoot == bytes32(0)) return;
        try funding.accrueCapital(RUN, latestRoot) returns (uint256 amount) {
            ghostAccrued += amount;
            if (revokedRoot[latestRoot]) ghostRevokedAccrued += amount;
            ++calls[this.accrue.selector];
        } catch {}
    }

    function warp(uint256 secs) external {
        vm.warp(block.timestamp + bound(secs, 1, 12 hours));
        ++calls[this.warp.selector];
    }

    function cancel(uint256 coin) external {
        // rarely, and after some rounds: a cancelled run stops most other paths
        if (coin % 8 != 0 || calls[this.commitRoot.selector] < 3) return;
        vm.prank(governance);
        try funding.cancelRun(RUN) {
            ++calls[this.cancel.selector];
        } catch {}
    }

    function refund(uint256 who) external {
        try funding.refund(RUN, actors[who % N]) returns (uint256 amount) {
            ghostRefunded += amount;
            ++calls[this.refund.selector];
        } catch {}
    }

    function claimVested(uint256 who) external {
        try funding.claimVested(RUN, actors[who % N]) returns (uint256 amount) {
            ghostMinted += amount;
            ++calls[this.claimVested.selector];
        } catch {}
    }

    function actor(uint256 i) external view returns (address) {
        return actors[i];
    }
}

contract RunFundingInvariantTest is ColocoTest {
    FundingHandler internal handler;

    function setUp() public override {
        super.setUp();
        vm.prank(address(timelock));
        config.setOwnershipSplit(8000, 1000, 1000);
        handler = new FundingHandler(funding, ledger, committer, address(timelock));
        targetContract(address(handler));
    }

    /// ETH paid out + ETH held == ETH deposited, at every step.
    function invariant_ethConserved() public view {
        assertEq(
            handler.ghostPaidCompute() + handler.ghostRefunded() + address(funding).balance,
            handler.ghostDeposited()
        );
        RunFunding.Run memory run = funding.runOf(handler.RUN());
        assertEq(run.totalDeposited, handler.ghostDeposited());
        assertEq(run.ethPaid, handler.ghostPaidCompute());
        assertEq(run.refunded, handler.ghostRefunded());
    }

    /// Compute is paid at most what roots committed, never for a forged leaf or a revoked root.
    function invariant_computePaidOnlyForCommittedLeaves() public view {
        RunFunding.Run memory run = funding.runOf(handler.RUN());
        assertLe(run.ethPaid, run.ethCommitted);
        assertLe(run.ethCommitted, run.totalDeposited);
        assertEq(handler.ghostInflatedPaid(), 0);
        assertEq(handler.ghostRevokedPaid(), 0);
    }

    /// Vested capital never exceeds the capital pool, and every minted token was a vested claim.
    function invariant_capitalWithinPool() public view {
        RunFunding.Run memory run = funding.runOf(handler.RUN());
        assertLe(handler.ghostMinted(), run.capitalPool);
        assertEq(run.capitalPool, handler.ghostAccrued());
        assertEq(handler.ghostRevokedAccrued(), 0);
        // never more capital than the run's compute budget times capital/compute (10/80)
        assertLe(run.capitalPool, ledger.runBudget(handler.RUN()) / 8);
        assertEq(token.balanceOf(address(funding)), run.capitalPool - handler.ghostMinted());
        uint256 sum;
        uint256 held;
        for (uint256 i; i < 4; ++i) {
            sum += funding.capitalClaimed(handler.RUN(), handler.actor(i));
            held += token.balanceOf(handler.actor(i));
        }
        assertEq(sum, handler.ghostMinted());
        assertEq(held, handler.ghostMinted());
    }

    /// Each run commits roots and moves time (else the above prove little).
    function afterInvariant() external view {
        assertGt(handler.calls(FundingHandler.commitRoot.selector), 0, "no root");
        assertGt(handler.calls(FundingHandler.warp.selector), 0, "no warp");
    }

    /// Every handler path can succeed: one call each, in an order that makes each one pay.
    function test_handlerPathsAllSucceed() public {
        handler.deposit(1, 1 ether);
        handler.commitRoot(1);
        handler.commitRoot(2);
        handler.warp(1 hours);
        handler.accrue();
        handler.claimEth(0, 0);
        handler.commitRoot(3);
        handler.revokeLatest();
        handler.warp(12 hours);
        handler.warp(12 hours);
        handler.claimVested(0);
        handler.cancel(0);
        handler.refund(0);
        bytes4[9] memory paths = [
            FundingHandler.deposit.selector,
            FundingHandler.commitRoot.selector,
            FundingHandler.warp.selector,
            FundingHandler.claimEth.selector,
            FundingHandler.revokeLatest.selector,
            FundingHandler.claimVested.selector,
            FundingHandler.cancel.selector,
            FundingHandler.refund.selector,
            FundingHandler.accrue.selector
        ];
        for (uint256 i; i < paths.length; ++i) {
            assertGt(handler.calls(paths[i]), 0, vm.toString(paths[i]));
        }
        invariant_ethConserved();
        invariant_computePaidOnlyForCommittedLeaves();
        invariant_capitalWithinPool();
    }
}
