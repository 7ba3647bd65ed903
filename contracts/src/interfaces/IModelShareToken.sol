// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IModelShareToken
/// @notice The ownership token's mint surface: rewards through MINTER_ROLE (the
/// RewardDistributor) and grants through GRANTER_ROLE (the Timelock) within `GRANT_CAP`.
interface IModelShareToken {
    /// @notice The Timelock granted `amount` to `to`; `granted` is the running total.
    event Granted(address indexed to, uint256 amount, uint256 granted);

    /// @notice The grant would bring total grants to `granted`, above `cap`.
    error GrantCapExceeded(uint256 granted, uint256 cap);

    /// @notice Mints `amount` to `to`. Only MINTER_ROLE.
    function mint(address to, uint256 amount) external;

    /// @notice Mints a grant of `amount` to `to` within the lifetime cap. Only GRANTER_ROLE.
    function grant(address to, uint256 amount) external;
}
