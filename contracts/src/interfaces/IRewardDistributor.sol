// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IRewardDistributor
/// @notice Cumulative Merkle claims of ModelShareToken against the ContributionLedger's latest
/// rewards root. Leaf: OpenZeppelin StandardMerkleTree of (address account, uint256 cumulative),
/// `keccak256(bytes.concat(keccak256(abi.encode(account, cumulativeAmount))))`.
interface IRewardDistributor {
    /// @notice `amount` tokens were minted to `account`, which has now claimed `cumulativeAmount`.
    event Claimed(address indexed account, uint256 amount, uint256 cumulativeAmount);

    /// @notice No rewards root has been committed yet.
    error NoRewardsRoot();
    /// @notice The proof does not put (`account`, `cumulativeAmount`) under the latest root.
    error InvalidProof(address account, uint256 cumulativeAmount);
    /// @notice `account` already claimed `alreadyClaimed` >= `cumulativeAmount`.
    error NothingToClaim(address account, uint256 cumulativeAmount, uint256 alreadyClaimed);

    /// @notice Mints `cumulativeAmount - claimed(account)` to `account`. Anyone may call.
    /// @return amount The tokens minted now.
    function claim(address account, uint256 cumulativeAmount, bytes32[] calldata proof)
        external
        returns (uint256 amount);

    /// @notice The cumulative amount `account` has claimed so far.
    function claimed(address account) external view returns (uint256);
}
