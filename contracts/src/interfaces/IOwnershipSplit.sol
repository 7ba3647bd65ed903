// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IOwnershipSplit
/// @notice How each round's newly issued ownership (`rewardPerRound`) is shared between the
/// compute, code and capital pools, in basis points summing to 10,000. Part of TrainingConfig:
/// governed, and each change bumps its `version` and emits `ConfigUpdated(version,
/// "ownershipSplit")` like every setting.
interface IOwnershipSplit {
    /// @notice The three shares do not sum to 10,000 basis points.
    error InvalidOwnershipSplit(uint256 computeBps, uint256 codeBps, uint256 capitalBps);

    /// @notice The split in force, in basis points.
    function ownershipSplit()
        external
        view
        returns (uint16 computeBps, uint16 codeBps, uint16 capitalBps);

    /// @notice Each pool's tokens per round: `rewardPerRound * bps / 10,000` (rounded down).
    function poolRewards() external view returns (uint256 compute, uint256 code, uint256 capital);

    /// @notice Sets the split. Only governance; reverts `InvalidOwnershipSplit` unless it sums to
    /// 10,000.
    function setOwnershipSplit(uint16 computeBps, uint16 codeBps, uint16 capitalBps) external;
}
