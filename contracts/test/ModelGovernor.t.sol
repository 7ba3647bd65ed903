// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {IGovernor} from "@openzeppelin/contracts/governance/IGovernor.sol";
import {ITrainingConfig} from "../src/interfaces/ITrainingConfig.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {ColocoTest} from "./utils/ColocoTest.sol";
import {StandardMerkleTree} from "./utils/StandardMerkleTree.sol";

/// Governance end to end on the deployed system: holders earn votes by claiming rewards
/// (auto-delegated, no grant involved),
/// propose a TrainingConfig change, vote, queue in the Timelock, execute; and a proposal that
/// misses quorum never executes.
contract ModelGovernorTest is ColocoTest {
    address internal whale = makeAddr("whale");
    address internal minnow = makeAddr("minnow");

    function setUp() public override {
        super.setUp();
        // 96% / 1% / 3% of the supply, earned through reward claims.
        vm.prank(address(timelock));
        config.setRewardPerRound(1000e18);
        bytes32[] memory leaves = new bytes32[](3);
        leaves[0] = StandardMerkleTree.leaf(whale, 960e18);
        leaves[1] = StandardMerkleTree.leaf(minnow, 10e18);
        leaves[2] = StandardMerkleTree.leaf(stranger, 30e18);
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        _commitRoot(tree[0]);
        distributor.claim(whale, 960e18, StandardMerkleTree.proof(tree, leaves[0]));
        distributor.claim(minnow, 10e18, StandardMerkleTree.proof(tree, leaves[1]));
        distributor.claim(stranger, 30e18, StandardMerkleTree.proof(tree, leaves[2]));
        assertEq(token.granted(), 0);
        vm.warp(block.timestamp + 1);
    }

    function _proposal(uint32 steps)
        internal
        view
        returns (address[] memory targets, uint256[] memory values, bytes[] memory calldatas)
    {
        targets = new address[](1);
        values = new uint256[](1);
        calldatas = new bytes[](1);
        targets[0] = address(config);
        calldatas[0] = abi.encodeCall(ITrainingConfig.setInnerLoop, (steps, 2000));
    }

    function _propose(address proposer, uint32 steps, string memory description)
        internal
        returns (uint256 id)
    {
        (address[] memory t, uint256[] memory v, bytes[] memory c) = _proposal(steps);
        vm.prank(proposer);
        id = governor.propose(t, v, c, description);
        vm.warp(block.timestamp + governor.votingDelay() + 1);
    }

    function test_governance_endToEnd_changesTrainingConfig() public {
        assertEq(token.getVotes(whale), 960e18); // no delegate() call was needed
        string memory description = "H=100, inner lr 2e-3";
        uint256 id = _propose(minnow, 100, description);
        assertEq(uint8(governor.state(id)), uint8(IGovernor.ProposalState.Active));

        vm.prank(whale);
        governor.castVote(id, 1);
        vm.prank(minnow);
        governor.castVote(id, 0);
        (uint256 against, uint256 forVotes,) = governor.proposalVotes(id);
        assertEq(forVotes, 960e18);
        assertEq(against, 10e18);

        vm.warp(block.timestamp + governor.votingPeriod());
        assertEq(uint8(governor.state(id)), uint8(IGovernor.ProposalState.Succeeded));
        (address[] memory t, uint256[] memory v, bytes[] memory c) = _proposal(100);
        bytes32 descHash = keccak256(bytes(description));
        governor.queue(t, v, c, descHash);
        assertEq(uint8(governor.state(id)), uint8(IGovernor.ProposalState.Queued));

        vm.warp(block.timestamp + timelock.getMinDelay() + 1);
        uint64 versionBefore = config.version();
        vm.prank(stranger); // executor role is open to anyone
        governor.execute(t, v, c, descHash);
        assertEq(uint8(governor.state(id)), uint8(IGovernor.ProposalState.Executed));
        assertEq(config.current().innerSteps, 100);
        assertEq(config.current().innerLrE6, 2000);
        assertEq(config.version(), versionBefore + 1);
    }

    function test_governance_slashesThroughTimelock() public {
        _registerAndStake(nodeKey, 2 ether);
        address[] memory t = new address[](1);
        uint256[] memory v = new uint256[](1);
        bytes[] memory c = new bytes[](1);
        t[0] = address(stakeManager);
        c[0] = abi.encodeCall(
            stakeManager.proposeSlash, (node, 1.5 ether, keccak256("audit #7"), address(0))
        );
        vm.prank(whale);
        uint256 id = governor.propose(t, v, c, "slash node for audit #7");
        vm.warp(block.timestamp + governor.votingDelay() + 1);
        vm.prank(whale);
        governor.castVote(id, 1);
        vm.warp(block.timestamp + governor.votingPeriod());
        bytes32 descHash = keccak256("slash node for audit #7");
        governor.queue(t, v, c, descHash);
        vm.warp(block.timestamp + timelock.getMinDelay() + 1);
        governor.execute(t, v, c, descHash);
        assertTrue(stakeManager.isFrozen(node));
        vm.warp(block.timestamp + SLASH_DISPUTE);
        stakeManager.executeSlash(1);
        (,, uint256 staked,,) = stakeManager.nodes(node);
        assertEq(staked, 0.5 ether);
        assertEq(treasury.balance, 1.5 ether);
        assertFalse(stakeManager.isActive(node));
    }

    function test_governance_proposalWithoutQuorumDoesNotExecute() public {
        uint64 versionBefore = config.version();
        string memory description = "H=7";
        uint256 id = _propose(minnow, 7, description);
        vm.prank(minnow); // 1% of supply votes for: below the 4% quorum
        governor.castVote(id, 1);
        vm.warp(block.timestamp + governor.votingPeriod());
        assertEq(uint8(governor.state(id)), uint8(IGovernor.ProposalState.Defeated));
        assertLt(10e18, governor.quorum(block.timestamp - 1));

        (address[] memory t, uint256[] memory v, bytes[] memory c) = _proposal(7);
        bytes32 descHash = keccak256(bytes(description));
        vm.expectPartialRevert(IGovernor.GovernorUnexpectedProposalState.selector);
        governor.queue(t, v, c, descHash);
        vm.expectPartialRevert(IGovernor.GovernorUnexpectedProposalState.selector);
        governor.execute(t, v, c, descHash);
        assertEq(config.current().innerSteps, 50);
        assertEq(config.version(), versionBefore);
    }

    function test_governance_votesAreSnapshottedAtProposal() public {
        uint256 id = _propose(minnow, 9, "H=9");
        // tokens moved after the snapshot do not carry votes
        vm.prank(whale);
        assertTrue(token.transfer(minnow, 500e18));
        vm.prank(minnow);
        governor.castVote(id, 1);
        (, uint256 forVotes,) = governor.proposalVotes(id);
        assertEq(forVotes, 10e18);
    }

    function test_governance_timelockCannotBeBypassed() public {
        vm.expectRevert(abi.encodeWithSelector(Ownable.OwnableUnauthorizedAccount.selector, whale));
        vm.prank(whale);
        config.setInnerLoop(1, 1);
        bytes32 proposer = timelock.PROPOSER_ROLE();
        assertTrue(timelock.hasRole(proposer, address(governor)));
        assertFalse(timelock.hasRole(proposer, whale));
    }

    function test_governor_settings() public view {
        assertEq(governor.name(), "coloco governor");
        assertEq(governor.votingDelay(), 1);
        assertEq(governor.votingPeriod(), 20);
        assertEq(governor.proposalThreshold(), 0);
        assertEq(governor.quorumNumerator(), 4);
        assertEq(governor.timelock(), address(timelock));
        assertEq(address(governor.token()), address(token));
        assertEq(governor.COUNTING_MODE(), "support=bravo&quorum=for,abstain");
        assertEq(governor.CLOCK_MODE(), "mode=timestamp");
        assertEq(governor.clock(), block.timestamp);
        assertEq(
            governor.governanceLatency(),
            governor.votingDelay() + governor.votingPeriod() + governor.lateQuorumVoteExtension()
                + timelock.getMinDelay()
        );
    }

    /// Attack (a holder of a leaked committer key captures governance): the committer's root
    /// pays at most the committed budget, and the root is pending (revocable) before it pays,
    /// so no vote weight appears at once.
    function test_attack_committerCannotMintVotesAtOnce() public {
        address thief = makeAddr("thief");
        bytes32[] memory leaves = new bytes32[](2);
        leaves[0] = StandardMerkleTree.leaf(thief, 1e30);
        leaves[1] = StandardMerkleTree.leaf(whale, 1);
        bytes32[] memory tree = StandardMerkleTree.build(leaves);
        _commit(tree[0], config.rewardPerRound());
        bytes32[] memory proof = StandardMerkleTree.proof(tree, leaves[0]);
        vm.expectPartialRevert(bytes4(keccak256("RootPending(bytes32,uint64)")));
        distributor.claim(thief, 1e30, proof);
        vm.prank(guardian);
        ledger.revokeRoot(tree[0]);
        assertEq(token.getVotes(thief), 0);
    }

    /// Attack (grant cap capture): grants are rate-limited per period.
    function test_attack_grantsAreRateLimited() public {
        vm.startPrank(address(timelock));
        token.grant(stranger, GRANT_LIMIT);
        vm.expectRevert(
            abi.encodeWithSelector(bytes4(keccak256("GrantRateExceeded(uint256,uint256)")), 1, 0)
        );
        token.grant(stranger, 1);
        vm.stopPrank();
        assertEq(IAccessControl(address(token)).hasRole(bytes32(0), address(timelock)), false);
    }
}
