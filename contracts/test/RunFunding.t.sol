// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {IRunFunding} from "../src/interfaces/IRunFunding.sol";
import {IOwnershipSplit} from "../src/interfaces/IOwnershipSplit.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";
import {RunFunding} from "../src/RunFunding.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Shared set-up: a run opened for deposits, committed on the ledger, with a 80/10/10 split.
abstract contract FundingBase is ColocoTest {
    bytes32 internal constant RUN = bytes32(uint256(1));
    uint64 internal constant DURATION = 1000;
    uint128 internal constant ETH_PER_ROUND = 1 ether;

    address internal alice = makeAddr("alice");
    address internal bob = makeAddr("bob");
    uint64 internal fundingEnd;

    function setUp() public virtual override {
        super.setUp();
        vm.startPrank(address(timelock));
        config.setOwnershipSplit(8000, 1000, 1000);
        funding.grantRole(funding.GUARDIAN_ROLE(), guardian);
        vm.stopPrank();
        fundingEnd = uint64(block.timestamp) + DURATION;
        vm.prank(committer);
        funding.openRun(RUN, fundingEnd, ETH_PER_ROUND);
        vm.deal(alice, 100 ether);
        vm.deal(bob, 100 ether);
    }

    /// @dev Commits ledger round `round` of RUN with the full compute budget and an ETH root
    /// paying (alice, bob) cumulatively.
    function _commitEth(uint64 round, uint256 toAlice, uint256 toBob)
        internal
        returns (bytes32[] memory tree)
    {
        (uint256 compute,,) = config.poolRewards();
        bytes32 rewardsRoot = keccak256(abi.encode("rewards", round));
        vm.prank(committer);
        ledger.commitRound(
            RUN, round, rewardsRoot, keccak256(abi.encode(round)), 1, bytes32(0), compute
        );
        tree = _tree(toAlice, toBob);
        vm.prank(committer);
        funding.commitEthRoot(RUN, round, tree[0], toAlice + toBob);
    }

    /// @dev Lets `root`'s dispute window pass and accrues its capital share.
    function _accrue(bytes32 root) internal returns (uint256) {
        vm.warp(Math.max(block.timestamp, funding.rootOf(RUN, root).finalizesAt));
        return funding.accrueCapital(RUN, root);
    }

    function _tree(uint256 toAlice, uint256 toBob) internal view returns (bytes32[] memory) {
        bytes32[] memory leaves = new bytes32[](2);
        leaves[0] = StandardMerkleTree.leaf(alice, toAlice);
        leaves[1] = StandardMerkleTree.leaf(bob, toBob);
        return StandardMerkleTree.build(leaves);
    }

    function _proof(bytes32[] memory tree, address who, uint256 amount)
        internal
        pure
        returns (bytes32[] memory)
    {
        return StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(who, amount));
    }

    function _deposit(address who, uint256 amount) internal {
        vm.prank(who);
        funding.deposit{value: amount}(RUN);
    }
}

contract RunFundingTest is FundingBase {
    // ------------------------------------------------------------------ split (TrainingConfig)

    function test_setOwnershipSplit_bumpsVersionAndEmits() public {
        uint64 v = config.version();
        vm.expectEmit(address(config));
        emit ITrainingConfig.ConfigUpdated(v + 1, "ownershipSplit");
        vm.prank(address(timelock));
        config.setOwnershipSplit(7000, 2000, 1000);
        (uint16 a, uint16 b, uint16 c) = config.ownershipSplit();
        assertEq(uint256(a) * 1e8 + uint256(b) * 1e4 + c, 700_020_001_000);
        (uint256 compute, uint256 code, uint256 capital) = config.poolRewards();
        assertEq(compute, 70e18);
        assertEq(code, 20e18);
        assertEq(capital, 10e18);
    }

    function test_setOwnershipSplit_revertsWhenNotSummingTo10000() public {
        vm.expectRevert(
            abi.encodeWithSelector(IOwnershipSplit.InvalidOwnershipSplit.selector, 8000, 1000, 999)
        );
        vm.prank(address(timelock));
        config.setOwnershipSplit(8000, 1000, 999);
    }

    function test_setOwnershipSplit_revertsWhenNotGovernance() public {
        vm.expectRevert(
            abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, stranger)
        );
        vm.prank(stranger);
        config.setOwnershipSplit(10_000, 0, 0);
    }

    // ------------------------------------------------------------------ openRun

    function test_openRun_revertsWhenOpenTwice() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RunAlreadyOpen.selector, RUN));
        vm.prank(committer);
        funding.openRun(RUN, fundingEnd, 1);
    }

    function test_openRun_revertsWhenEndNotInFuture() public {
        uint64 now_ = uint64(block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.InvalidFundingEnd.selector, now_, now_));
        vm.prank(committer);
        funding.openRun(bytes32(uint256(2)), now_, 1);
    }

    function test_openRun_revertsWhenStranger() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        funding.openRun(bytes32(uint256(2)), fundingEnd, 1);
    }

    // ------------------------------------------------------------------ deposit

    function test_deposit_recordsAmountAndTime() public {
        vm.expectEmit(address(funding));
        emit IRunFunding.Deposited(RUN, alice, 2 ether, 2 ether);
        _deposit(alice, 2 ether);
        RunFunding.Backer memory b = funding.backerOf(RUN, alice);
        assertEq(b.deposited, 2 ether);
        assertEq(b.weightedTime, 2 ether * block.timestamp);
        assertEq(address(funding).balance, 2 ether);
    }

    function test_deposit_revertsAfterRunEnded() public {
        vm.warp(fundingEnd);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.RunEnded.selector, RUN, fundingEnd, fundingEnd)
        );
        _deposit(alice, 1 ether);
    }

    function test_deposit_revertsOnCancelledRun() public {
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.RunIsCancelled.selector, RUN, uint64(block.timestamp)
            )
        );
        _deposit(alice, 1 ether);
    }

    function test_deposit_revertsOnZeroAndUnknownRun() public {
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.InvalidDeposit.selector, 0));
        _deposit(alice, 0);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.UnknownRun.selector, bytes32(uint256(9)))
        );
        vm.prank(alice);
        funding.deposit{value: 1}(bytes32(uint256(9)));
    }

    // ------------------------------------------------------------------ ETH roots and claims

    function test_claimEth_paysAfterDisputeWindow() public {
        _deposit(alice, 3 ether);
        bytes32[] memory tree = _commitEth(0, 0.25 ether, 0.5 ether);
        uint64 finalizesAt = uint64(block.timestamp) + funding.disputeWindow();
        bytes32[] memory proof = _proof(tree, bob, 0.5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.RootPending.selector, tree[0], finalizesAt)
        );
        funding.claimEth(RUN, bob, 0.5 ether, tree[0], proof);
        vm.warp(finalizesAt);
        uint256 before = bob.balance;
        vm.prank(stranger); // anyone may submit; the ETH goes to the account
        assertEq(funding.claimEth(RUN, bob, 0.5 ether, tree[0], proof), 0.5 ether);
        assertEq(bob.balance - before, 0.5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.NothingToClaim.selector, bob, 0.5 ether, 0.5 ether)
        );
        funding.claimEth(RUN, bob, 0.5 ether, tree[0], proof);
    }

    function test_claimEth_olderFinalRootStillPays() public {
        _deposit(alice, 3 ether);
        bytes32[] memory first = _commitEth(0, 0.25 ether, 0.5 ether);
        _commitEth(1, 0.75 ether, 1 ether); // a new commit must not break claims in flight
        vm.warp(block.timestamp + funding.disputeWindow());
        funding.claimEth(RUN, alice, 0.25 ether, first[0], _proof(first, alice, 0.25 ether));
        assertEq(funding.ethClaimed(RUN, alice), 0.25 ether);
    }

    function test_claimEth_revertsOnInflatedAmount() public {
        _deposit(alice, 3 ether);
        bytes32[] memory tree = _commitEth(0, 0.25 ether, 0.5 ether);
        vm.warp(block.timestamp + funding.disputeWindow());
        bytes32[] memory proof = _proof(tree, bob, 0.5 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.InvalidProof.selector, bob, 0.6 ether));
        funding.claimEth(RUN, bob, 0.6 ether, tree[0], proof);
    }

    function test_claimEth_revokedRootNeverPays() public {
        _deposit(alice, 3 ether);
        bytes32[] memory tree = _commitEth(0, 0.25 ether, 0.5 ether);
        vm.expectEmit(address(funding));
        emit IRunFunding.EthRootRevoked(RUN, tree[0], guardian);
        vm.prank(guardian);
        funding.revokeEthRoot(RUN, tree[0]);
        vm.warp(block.timestamp + funding.disputeWindow());
        bytes32[] memory proof = _proof(tree, bob, 0.5 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RootRevoked.selector, tree[0]));
        funding.claimEth(RUN, bob, 0.5 ether, tree[0], proof);
    }

    function test_revokeEthRoot_revertsWhenFinalUnknownOrStranger() public {
        _deposit(alice, 3 ether);
        bytes32[] memory tree = _commitEth(0, 0.25 ether, 0.5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        funding.revokeEthRoot(RUN, tree[0]);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.UnknownRoot.selector, RUN, bytes32(uint256(5)))
        );
        vm.prank(guardian);
        funding.revokeEthRoot(RUN, bytes32(uint256(5)));
        uint64 finalizesAt = uint64(block.timestamp) + funding.disputeWindow();
        vm.warp(finalizesAt);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.RootAlreadyFinal.selector, tree[0], finalizesAt)
        );
        vm.prank(guardian);
        funding.revokeEthRoot(RUN, tree[0]);
    }

    function test_commitEthRoot_revertsWhenNotCommitter() public {
        _deposit(alice, 1 ether);
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("c"), 1, bytes32(0), 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                stranger,
                funding.COMMITTER_ROLE()
            )
        );
        vm.prank(stranger);
        funding.commitEthRoot(RUN, 0, keccak256("r"), 1);
    }

    function test_commitEthRoot_revertsOnUncommittedOrRepeatedRound() public {
        _deposit(alice, 3 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RoundNotCommitted.selector, RUN, 0));
        vm.prank(committer);
        funding.commitEthRoot(RUN, 0, keccak256("r"), 1);
        _commitEth(0, 1, 1);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RoundNotIncreasing.selector, RUN, 0, 0));
        vm.prank(committer);
        funding.commitEthRoot(RUN, 0, keccak256("r2"), 2);
    }

    function test_commitEthRoot_boundsWhatARootMayPay() public {
        _deposit(alice, 1.5 ether);
        _commitEth(0, 0.5 ether, 0.5 ether);
        vm.prank(committer);
        ledger.commitRound(RUN, 1, bytes32(0), keccak256("1"), 1, bytes32(0), 0);
        vm.startPrank(committer);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.TotalDecreased.selector, 0.5 ether, 1 ether)
        );
        funding.commitEthRoot(RUN, 1, keccak256("a"), 0.5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.EthPerRoundExceeded.selector, 1.1 ether, 1 ether)
        );
        funding.commitEthRoot(RUN, 1, keccak256("a"), 2.1 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.EthBudgetExceeded.selector, 2 ether, 1.5 ether)
        );
        funding.commitEthRoot(RUN, 1, keccak256("a"), 2 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.InvalidRoot.selector, bytes32(0)));
        funding.commitEthRoot(RUN, 1, bytes32(0), 1 ether);
        vm.stopPrank();
    }

    /// A committer publishing two roots that each give all to a different account cannot make
    /// the contract pay out more than it committed.
    function test_claimEth_revertsWhenRootsOverpay() public {
        _deposit(alice, 3 ether);
        bytes32[] memory first = _commitEth(0, 1 ether, 0);
        bytes32[] memory second = _commitEth(1, 0.5 ether, 1 ether); // alice's 1 ETH cut to 0.5
        vm.warp(block.timestamp + funding.disputeWindow());
        funding.claimEth(RUN, alice, 1 ether, first[0], _proof(first, alice, 1 ether));
        bytes32[] memory proof = _proof(second, bob, 1 ether);
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.EthOverpaid.selector, 2 ether, 1.5 ether)
        );
        funding.claimEth(RUN, bob, 1 ether, second[0], proof);
    }

    /// A recipient that re-enters during its payment finds nothing more to take.
    function test_claimEth_reentryPaysNothingTwice() public {
        Reenterer attacker = new Reenterer(funding);
        _deposit(alice, 3 ether);
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("0"), 1, bytes32(0), 0);
        bytes32[] memory leaves = new bytes32[](2);
        leaves[0] = StandardMerkleTree.leaf(address(attacker), 1 ether);
        leaves[1] = StandardMerkleTree.leaf(bob, 1 ether);
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        vm.prank(committer);
        funding.commitEthRoot(RUN, 0, tree[0], 1 ether);
        vm.warp(block.timestamp + funding.disputeWindow());
        bytes32[] memory proof =
            StandardMerkleTree.proof(tree, StandardMerkleTree.leaf(address(attacker), 1 ether));
        attacker.arm(RUN, 1 ether, tree[0], proof);
        funding.claimEth(RUN, address(attacker), 1 ether, tree[0], proof);
        assertEq(address(attacker).balance, 1 ether);
        assertEq(
            attacker.reentryError(),
            abi.encodeWithSelector(
                IRunFunding.NothingToClaim.selector, address(attacker), 1 ether, 1 ether
            )
        );
    }

    // ------------------------------------------------------------------ capital ownership

    function test_claimVested_revertsBeforeRunEnds() public {
        _deposit(alice, 1 ether);
        _commitEth(0, 1, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.VestingNotStarted.selector, RUN, fundingEnd, uint64(block.timestamp)
            )
        );
        funding.claimVested(RUN, alice);
    }

    function test_claimVested_revertsWhenNothingVestedYet() public {
        _deposit(alice, 1 ether);
        _commitEth(0, 1, 0);
        vm.warp(fundingEnd);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.NothingVested.selector, alice, 0, 0));
        funding.claimVested(RUN, alice);
    }

    /// Deposit x time: alice funds the whole run, bob the same amount for its second half.
    function test_claimVested_proportionalToDepositTimesTimeAndVestsLinearly() public {
        _deposit(alice, 1 ether);
        vm.warp(block.timestamp + DURATION / 2);
        _deposit(bob, 1 ether);
        bytes32 first = _commitEth(0, 1, 0)[0];
        bytes32 second = _commitEth(1, 1 ether, 0)[0];
        assertEq(funding.runOf(RUN).capitalPool, 0); // nothing before the roots are final
        _accrue(first);
        _accrue(second);
        uint256 pool = funding.runOf(RUN).capitalPool;
        assertEq(pool, 20e18); // two rounds x 10% of 100 CMS
        assertEq(funding.entitlement(RUN, alice), pool * 2 / 3);
        assertEq(funding.entitlement(RUN, bob), pool / 3);
        uint64 period = funding.vestingPeriod();
        vm.warp(fundingEnd + period / 2);
        vm.expectEmit(address(funding));
        emit IRunFunding.CapitalClaimed(RUN, alice, pool / 3, pool / 3);
        funding.claimVested(RUN, alice);
        assertEq(token.balanceOf(alice), pool / 3);
        vm.warp(fundingEnd + period * 2);
        funding.claimVested(RUN, alice);
        funding.claimVested(RUN, bob);
        assertEq(token.balanceOf(alice), pool * 2 / 3);
        assertEq(token.balanceOf(bob), pool / 3);
        assertEq(token.getVotes(bob), pool / 3); // capital holders vote like any holder
    }

    // ------------------------------------------------------------------ cancel and refund

    function test_refund_revertsOnLiveRun() public {
        _deposit(alice, 1 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.RunNotCancelled.selector, RUN));
        funding.refund(RUN, alice);
    }

    function test_cancelRun_refundsUnspentProRata() public {
        _deposit(alice, 3 ether);
        _deposit(bob, 1 ether);
        bytes32[] memory tree = _commitEth(0, 0.5 ether, 0.5 ether); // 1 ETH promised to compute
        vm.expectEmit(address(funding));
        emit IRunFunding.RunCancelled(RUN, 3 ether);
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
        uint64 pendingUntil = funding.rootOf(RUN, tree[0]).finalizesAt;
        vm.expectRevert(
            abi.encodeWithSelector(IRunFunding.RefundPending.selector, RUN, pendingUntil)
        );
        funding.refund(RUN, alice);
        vm.warp(pendingUntil); // the root can no longer be revoked: refunds open
        uint256 a0 = alice.balance;
        funding.refund(RUN, alice);
        assertEq(alice.balance - a0, 2.25 ether);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.NothingToRefund.selector, RUN, alice));
        funding.refund(RUN, alice);
        vm.expectRevert(abi.encodeWithSelector(IRunFunding.NothingToRefund.selector, RUN, stranger));
        funding.refund(RUN, stranger);
        funding.refund(RUN, bob);
        // work already committed is still paid
        funding.claimEth(RUN, alice, 0.5 ether, tree[0], _proof(tree, alice, 0.5 ether));
        funding.claimEth(RUN, bob, 0.5 ether, tree[0], _proof(tree, bob, 0.5 ether));
        assertEq(address(funding).balance, 0);
    }

    function test_cancelRun_revertsWhenNotGovernanceOrTwice() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, committer, bytes32(0)
            )
        );
        vm.prank(committer);
        funding.cancelRun(RUN);
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.RunIsCancelled.selector, RUN, uint64(block.timestamp)
            )
        );
        vm.prank(address(timelock));
        funding.cancelRun(RUN);
    }

    function test_setters_boundsAndAccess() public {
        vm.startPrank(address(timelock));
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.InvalidDuration.selector, bytes32("vestingPeriod"), 0
            )
        );
        funding.setVestingPeriod(0);
        uint64 tooLong = funding.MAX_DISPUTE_WINDOW() + 1;
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.InvalidDuration.selector, bytes32("disputeWindow"), tooLong
            )
        );
        funding.setDisputeWindow(tooLong);
        vm.expectRevert(
            abi.encodeWithSelector(
                IRunFunding.InvalidDuration.selector, bytes32("disputeWindow"), 0
            )
        );
        funding.setDisputeWindow(0); // F2: a root always waits for its window
        funding.setEthPerRound(RUN, 5 ether);
        vm.stopPrank();
        assertEq(funding.runOf(RUN).ethPerRound, 5 ether);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, committer, bytes32(0)
            )
        );
        vm.prank(committer);
        funding.setEthPerRound(RUN, 5 ether);
    }
}

/// Re-enters claimEth from its receive hook and records why the re-entry failed.
contract Reenterer {
    RunFunding internal immutable funding;
    bytes32 internal run;
    uint256 internal amount;
    bytes32 internal root;
    bytes32[] internal proof;
    bytes public reentryError;

    constructor(RunFunding funding_) {
        funding = funding_;
    }

    function arm(bytes32 run_, uint256 amount_, bytes32 root_, bytes32[] memory proof_) external {
        run = run_;
        amount = amount_;
        root = root_;
        proof = proof_;
    }

    receive() external payable {
        if (reentryError.length != 0) return;
        try funding.claimEth(run, address(this), amount, root, proof) {
            reentryError = "paid twice";
        } catch (bytes memory err) {
            reentryError = err;
        }
    }
}
