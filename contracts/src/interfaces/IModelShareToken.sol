// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IModelShareToken
/// @notice The ownership token's mint surface: rewards through the fixed MINTER (the
/// RewardDistributor, itself bounded by the ledger's committed budget) and grants through
/// GRANTER_ROLE (the Timelock), at most `GRANT_LIMIT` per sliding `GRANT_PERIOD`.
interface IModelShareToken {
    /// @notice The Timelock granted `amount` to `to`; `granted` is the running total.
    event Granted(address indexed to, uint256 amount, uint256 granted);

    /// @notice The grant of `amount` exceeds the `available` allowance of the current period.
    error GrantRateExceeded(uint256 amount, uint256 available);
    /// @notice `caller` is neither the MINTER nor a MINTER_ROLE holder.
    error NotMinter(address caller);
    /// @notice The grant limit or period is zero.
    error InvalidGrantLimit(uint256 limit, uint256 period);

    /// @notice Mints `amount` to `to`. Only the MINTER or a MINTER_ROLE holder.
    function mint(address to, uint256 amount) external;

    /// @notice Mints a grant of `amount` to `to` within the rate limit. Only GRANTER_ROLE.
    function grant(address to, uint256 amount) external;

    /// @notice What `grant` may still mint in the current sliding period.
    function grantAvailable() external view returns (uint256);
}
