// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {ICodeRegistry} from "../src/interfaces/ICodeRegistry.sol";
import {CodeRegistry} from "../src/CodeRegistry.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";

contract CodeRegistryTest is ColocoTest {
    bytes32 internal constant RUN = bytes32(uint256(7));
    bytes32 internal constant COMMIT = bytes32(bytes20(keccak256("commit")));
    string internal constant REPO = "https://example.org/coloco.git";
    string internal constant DESC = "https://example.org/pr/1";

    address internal reviewer = makeAddr("reviewer");
    address internal dev = makeAddr("dev");

    function setUp() public override {
        super.setUp();
        vm.startPrank(address(timelock));
        config.setOwnershipSplit(8000, 1000, 1000); // 10 CMS per round to code
        codeRegistry.grantRole(codeRegistry.COMMITTEE_ROLE(), reviewer);
        codeRegistry.setCommitteeBudget(50e18, 1 days);
        codeRegistry.setVoteThreshold(20e18);
        vm.stopPrank();
        (uint256 compute,,) = config.poolRewards();
        vm.prank(committer);
        ledger.commitRound(RUN, 0, bytes32(0), keccak256("genesis"), 1, bytes32(0), 0);
        for (uint64 r = 1; r <= 10; ++r) {
            bytes32 root = keccak256(abi.encode("root", r));
            vm.prank(committer);
            ledger.commitRound(RUN, r, root, keccak256(abi.encode(r)), 1, bytes32(0), compute);
        }
        assertEq(codeRegistry.codePool(RUN), 100e18); // 10 rounds that paid the compute pool
    }

    function _submit() internal returns (uint256 id) {
        vm.prank(dev);
        id = codeRegistry.submit(RUN, REPO, COMMIT, DESC);
    }

    function test_submit_emitsEverythingAndStoresOneRecord() public {
        vm.expectEmit(address(codeRegistry));
        emit ICodeRegistry.Submitted(1, RUN, dev, REPO, COMMIT, DESC);
        uint256 id = _submit();
        (CodeRegistry.Contribution memory c, bytes32 run) = codeRegistry.contributionOf(id);
        assertEq(c.contributor, dev);
        assertEq(uint8(c.status), uint8(ICodeRegistry.Status.Pending));
        assertEq(run, RUN);
    }

    function test_submit_revertsOnBadInput() public {
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.InvalidSubmission.selector, 0, COMMIT, 24)
        );
        codeRegistry.submit(RUN, "", COMMIT, DESC);
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.InvalidSubmission.selector, 30, bytes32(0), 24)
        );
        codeRegistry.submit(RUN, REPO, bytes32(0), DESC);
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.UnknownRun.selector, bytes32(uint256(8)))
        );
        codeRegistry.submit(bytes32(uint256(8)), REPO, COMMIT, DESC);
    }

    function test_approve_thenClaimMintsOnce() public {
        uint256 id = _submit();
        vm.expectEmit(address(codeRegistry));
        emit ICodeRegistry.Approved(id, RUN, 15e18, false);
        vm.prank(reviewer);
        codeRegistry.approve(id, 15e18);
        vm.prank(stranger);
        codeRegistry.claim(id);
        assertEq(token.balanceOf(dev), 15e18);
        assertEq(token.getVotes(dev), 15e18);
        vm.expectRevert(
            abi.encodeWithSelector(
                ICodeRegistry.NotClaimable.selector, id, ICodeRegistry.Status.Claimed
            )
        );
        codeRegistry.claim(id);
    }

    function test_approve_revertsOnSecondApproval() public {
        uint256 id = _submit();
        vm.prank(reviewer);
        codeRegistry.approve(id, 1e18);
        vm.expectRevert(
            abi.encodeWithSelector(
                ICodeRegistry.AlreadyDecided.selector, id, ICodeRegistry.Status.Approved
            )
        );
        vm.prank(reviewer);
        codeRegistry.approve(id, 1e18);
    }

    function test_approve_revertsOverCommitteeBudget() public {
        uint256[3] memory ids = [_submit(), _submit(), _submit()];
        vm.startPrank(reviewer);
        codeRegistry.approve(ids[0], 20e18);
        codeRegistry.approve(ids[1], 20e18);
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.CommitteeBudgetExceeded.selector, 20e18, 10e18)
        );
        codeRegistry.approve(ids[2], 20e18);
        vm.warp(block.timestamp + 1 days); // the budget refills over the period
        codeRegistry.approve(ids[2], 20e18);
        vm.stopPrank();
    }

    function test_approve_largeAmountNeedsVote() public {
        uint256 id = _submit();
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.AmountNeedsVote.selector, 21e18, 20e18)
        );
        vm.prank(reviewer);
        codeRegistry.approve(id, 21e18);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, reviewer, bytes32(0)
            )
        );
        vm.prank(reviewer);
        codeRegistry.approveByVote(id, 21e18);
        vm.expectEmit(address(codeRegistry));
        emit ICodeRegistry.Approved(id, RUN, 60e18, true);
        vm.prank(address(timelock));
        codeRegistry.approveByVote(id, 60e18);
    }

    function test_approve_revertsBeyondCodePool() public {
        uint256 a = _submit();
        uint256 b = _submit();
        vm.prank(address(timelock));
        codeRegistry.approveByVote(a, 90e18);
        vm.expectRevert(
            abi.encodeWithSelector(ICodeRegistry.CodePoolExceeded.selector, RUN, 110e18, 100e18)
        );
        vm.prank(reviewer);
        codeRegistry.approve(b, 20e18);
    }

    function test_approve_revertsForStrangerZeroOrUnknown() public {
        uint256 id = _submit();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector,
                stranger,
                codeRegistry.COMMITTEE_ROLE()
            )
        );
        vm.prank(stranger);
        codeRegistry.approve(id, 1e18);
        vm.startPrank(reviewer);
        vm.expectRevert(abi.encodeWithSelector(ICodeRegistry.InvalidAmount.selector, 0));
        codeRegistry.approve(id, 0);
        vm.expectRevert(abi.encodeWithSelector(ICodeRegistry.UnknownContribution.selector, 99));
        codeRegistry.approve(99, 1e18);
        vm.stopPrank();
    }

    function test_reject_withReasonIsFinal() public {
        uint256 id = _submit();
        vm.expectRevert(abi.encodeWithSelector(ICodeRegistry.InvalidReason.selector, 0));
        vm.prank(reviewer);
        codeRegistry.reject(id, "");
        vm.expectEmit(address(codeRegistry));
        emit ICodeRegistry.Rejected(id, RUN, reviewer, "duplicate of #1");
        vm.prank(reviewer);
        codeRegistry.reject(id, "duplicate of #1");
        vm.expectRevert(
            abi.encodeWithSelector(
                ICodeRegistry.AlreadyDecided.selector, id, ICodeRegistry.Status.Rejected
            )
        );
        vm.prank(reviewer);
        codeRegistry.approve(id, 1e18);
        vm.expectRevert(
            abi.encodeWithSelector(
                ICodeRegistry.NotClaimable.selector, id, ICodeRegistry.Status.Rejected
            )
        );
        codeRegistry.claim(id);
        uint256 other = _submit();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, stranger, bytes32(0)
            )
        );
        vm.prank(stranger);
        codeRegistry.reject(other, "spam");
    }

    /// Governance replaces the committee: a removed member can no longer approve.
    function test_committee_replacedByGovernance() public {
        uint256 id = _submit();
        bytes32 role = codeRegistry.COMMITTEE_ROLE();
        vm.startPrank(address(timelock));
        codeRegistry.revokeRole(role, reviewer);
        codeRegistry.grantRole(role, stranger);
        vm.stopPrank();
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, reviewer, role
            )
        );
        vm.prank(reviewer);
        codeRegistry.approve(id, 1e18);
        vm.prank(stranger);
        codeRegistry.approve(id, 1e18);
    }

    function test_setCommitteeBudget_boundsAndAccess() public {
        vm.expectRevert(abi.encodeWithSelector(ICodeRegistry.InvalidBudget.selector, 1, 0));
        vm.prank(address(timelock));
        codeRegistry.setCommitteeBudget(1, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, reviewer, bytes32(0)
            )
        );
        vm.prank(reviewer);
        codeRegistry.setCommitteeBudget(1e30, 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, reviewer, bytes32(0)
            )
        );
        vm.prank(reviewer);
        codeRegistry.setVoteThreshold(1e30);
    }

    /// F4: the code pool was `lastRound x code share`, and the committer moves `lastRound` by up
    /// to `maxRoundSkip` per commit with no compute paid: one skip opened a 10,000 CMS pool.
    /// The pool grows only with compute budget the ledger committed for the run.
    function test_attack_roundSkipsWithoutComputeOpenNoCodePool() public {
        bytes32 run = keccak256("skipped run");
        vm.startPrank(committer);
        ledger.commitRound(run, 0, bytes32(0), keccak256("g"), 1, bytes32(0), 0);
        ledger.commitRound(run, 1000, bytes32(0), keccak256("s"), 1, bytes32(0), 0);
        vm.stopPrank();
        assertEq(codeRegistry.codePool(run), 0, "a round skip opened a code pool");
    }

    /// F4: a committee member approved its own submission (100 CMS self-approved and claimed).
    function test_attack_committeeMemberCannotApproveOwnSubmission() public {
        vm.prank(reviewer);
        uint256 id = codeRegistry.submit(RUN, REPO, COMMIT, DESC);
        vm.prank(reviewer);
        try codeRegistry.approve(id, 10e18) {} catch {}
        (CodeRegistry.Contribution memory c,) = codeRegistry.contributionOf(id);
        assertEq(uint8(c.status), uint8(ICodeRegistry.Status.Pending), "self-approved");
    }
}
