// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {Governor} from "@openzeppelin/contracts/governance/Governor.sol";
import {GovernorSettings} from "@openzeppelin/contracts/governance/extensions/GovernorSettings.sol";
import {
    GovernorCountingSimple
} from "@openzeppelin/contracts/governance/extensions/GovernorCountingSimple.sol";
import {GovernorVotes} from "@openzeppelin/contracts/governance/extensions/GovernorVotes.sol";
import {
    GovernorVotesQuorumFraction
} from "@openzeppelin/contracts/governance/extensions/GovernorVotesQuorumFraction.sol";
import {
    GovernorTimelockControl
} from "@openzeppelin/contracts/governance/extensions/GovernorTimelockControl.sol";
import {
    GovernorPreventLateQuorum
} from "@openzeppelin/contracts/governance/extensions/GovernorPreventLateQuorum.sol";
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
import {IVotes} from "@openzeppelin/contracts/governance/utils/IVotes.sol";
import {IGovernanceLatency} from "./interfaces/IStakeManager.sol";

/// @title ModelGovernor
/// @notice Token holders' governor over TrainingConfig, slashing and grants: a stock OpenZeppelin
/// Governor (settings, simple counting, token votes, quorum fraction, timelock control), so
/// standard tooling and `cast` drive it, plus late-quorum protection (a vote that reaches quorum
/// late is extended, so a whale cannot swing it in the last second). Clock: timestamps (the
/// token's ERC-6372 clock), so every delay and period is in seconds.
contract ModelGovernor is
    IGovernanceLatency,
    Governor,
    GovernorSettings,
    GovernorPreventLateQuorum,
    GovernorCountingSimple,
    GovernorVotes,
    GovernorVotesQuorumFraction,
    GovernorTimelockControl
{
    /// @param token The ModelShareToken (ERC20Votes).
    /// @param timelock The TimelockController that executes proposals.
    /// @param votingDelay_ Seconds between proposal and vote start.
    /// @param votingPeriod_ Seconds the vote lasts.
    /// @param proposalThreshold_ Votes needed to propose.
    /// @param quorumFraction Quorum in percent of the supply at the vote start.
    /// @param voteExtension Seconds a vote is extended when quorum is reached late.
    constructor(
        IVotes token,
        TimelockController timelock,
        uint48 votingDelay_,
        uint32 votingPeriod_,
        uint256 proposalThreshold_,
        uint256 quorumFraction,
        uint48 voteExtension
    )
        Governor("coloco governor")
        GovernorPreventLateQuorum(voteExtension)
        GovernorSettings(votingDelay_, votingPeriod_, proposalThreshold_)
        GovernorVotes(token)
        GovernorVotesQuorumFraction(quorumFraction)
        GovernorTimelockControl(timelock)
    {}

    /// @inheritdoc IGovernanceLatency
    function governanceLatency() external view returns (uint256) {
        return votingDelay() + votingPeriod() + lateQuorumVoteExtension()
            + TimelockController(payable(timelock())).getMinDelay();
    }

    // The overrides below only resolve multiple inheritance; none changes behaviour.

    function proposalDeadline(uint256 proposalId)
        public
        view
        override(Governor, GovernorPreventLateQuorum)
        returns (uint256)
    {
        return super.proposalDeadline(proposalId);
    }

    function _tallyUpdated(uint256 proposalId)
        internal
        override(Governor, GovernorPreventLateQuorum)
    {
        super._tallyUpdated(proposalId);
    }

    function votingDelay() public view override(Governor, GovernorSettings) returns (uint256) {
        return super.votingDelay();
    }

    function votingPeriod() public view override(Governor, GovernorSettings) returns (uint256) {
        return super.votingPeriod();
    }

    function quorum(uint256 timepoint)
        public
        view
        override(Governor, GovernorVotesQuorumFraction)
        returns (uint256)
    {
        return super.quorum(timepoint);
    }

    function proposalThreshold()
        public
        view
        override(Governor, GovernorSettings)
        returns (uint256)
    {
        return super.proposalThreshold();
    }

    function state(uint256 proposalId)
        public
        view
        override(Governor, GovernorTimelockControl)
        returns (ProposalState)
    {
        return super.state(proposalId);
    }

    function proposalNeedsQueuing(uint256 proposalId)
        public
        view
        override(Governor, GovernorTimelockControl)
        returns (bool)
    {
        return super.proposalNeedsQueuing(proposalId);
    }

    function _queueOperations(
        uint256 proposalId,
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) returns (uint48) {
        return super._queueOperations(proposalId, targets, values, calldatas, descriptionHash);
    }

    function _executeOperations(
        uint256 proposalId,
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) {
        super._executeOperations(proposalId, targets, values, calldatas, descriptionHash);
    }

    function _cancel(
        address[] memory targets,
        uint256[] memory values,
        bytes[] memory calldatas,
        bytes32 descriptionHash
    ) internal override(Governor, GovernorTimelockControl) returns (uint256) {
        return super._cancel(targets, values, calldatas, descriptionHash);
    }

    function _executor()
        internal
        view
        override(Governor, GovernorTimelockControl)
        returns (address)
    {
        return super._executor();
    }
}
