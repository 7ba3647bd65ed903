// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IRewardDistributor
/// @notice Cumulative Merkle claims of ModelShareToken against any finalized, unrevoked rewards
/// root of the ContributionLedger. Leaf: OpenZeppelin StandardMerkleTree of (address account,
/// uint256 cumulative), `keccak256(bytes.concat(keccak256(abi.encode(account, cumulative))))`.
/// The root a claim proves against is the one its proof leads to, so a proof built for any
/// committed tree works until the account claims against a later one.
/// @dev Bounds: total minted through claims never exceeds the proven root's `budget` (hence the
/// ledger's committed budget: per-round reward totals, each <= the governed rewardPerRound); a
/// root older than the account's last claimed root is refused, so a stale tree cannot be
/// replayed; the guardian may pause claims (funds stay where they are), only governance unpauses.
interface IRewardDistributor {
    /// @notice `amount` tokens were minted to `account`, which has now claimed `cumulativeAmount`.
    event Claimed(address indexed account, uint256 amount, uint256 cumulativeAmount);

    /// @notice The proof does not lead from (`account`, `cumulativeAmount`) to a committed root.
    error InvalidProof(address account, uint256 cumulativeAmount);
    /// @notice `account` already claimed `alreadyClaimed` >= `cumulativeAmount`.
    error NothingToClaim(address account, uint256 cumulativeAmount, uint256 alreadyClaimed);
    /// @notice `account` already claimed against root index `lastIndex` > `rootIndex`.
    error StaleRoot(address account, uint32 rootIndex, uint32 lastIndex);
    /// @notice Paying would bring total claimed to `totalClaimed`, above the root's `budget`.
    error BudgetExceeded(uint256 totalClaimed, uint256 budget);
    /// @notice `caller` is neither the guardian nor governance.
    error NotGuardian(address caller);

    /// @notice The role allowed to pause claims.
    function GUARDIAN_ROLE() external view returns (bytes32);

    /// @notice Mints `cumulativeAmount - claimed(account)` to `account`. The proof must lead to a
    /// root that is claimable on the ledger (reverts `RootPending`/`RootIsRevoked` from
    /// IContributionLedger otherwise). Anyone may call; not while paused.
    /// @return amount The tokens minted now.
    function claim(address account, uint256 cumulativeAmount, bytes32[] calldata proof)
        external
        returns (uint256 amount);

    /// @notice Stops claims. The guardian or governance.
    function pause() external;

    /// @notice Resumes claims. Only governance.
    function unpause() external;

    /// @notice The cumulative amount `account` has claimed so far.
    function claimed(address account) external view returns (uint256);

    /// @notice The index of the root `account` last claimed against (0: never claimed).
    function lastRootIndex(address account) external view returns (uint32);

    /// @notice Tokens minted through claims, all accounts together.
    function totalClaimed() external view returns (uint256);
}
