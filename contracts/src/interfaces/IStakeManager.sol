// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IStakeManager
/// @notice Node registry and native-currency stake. A node is its hot signing key; an operator
/// registers it, stakes for it and names a cold payout address for its rewards. Unstaking goes
/// through an unbonding delay during which the stake can still be slashed.
interface IStakeManager {
    /// @notice `operator` registered `node` with rewards going to `payout`.
    event NodeRegistered(address indexed node, address indexed operator, address payout);
    /// @notice `amount` wei was staked for `node`; `staked` is the new total.
    event Staked(address indexed node, address indexed from, uint256 amount, uint256 staked);
    /// @notice `amount` moved from staked to unbonding; withdrawable from `readyAt`.
    event UnstakeRequested(address indexed node, uint256 amount, uint256 unbonding, uint64 readyAt);
    /// @notice The unbonded `amount` was sent to `to`.
    event Withdrawn(address indexed node, address indexed to, uint256 amount);
    /// @notice The operator moved the node record from `oldNode` to `newNode`.
    event NodeKeyRotated(address indexed oldNode, address indexed newNode);
    /// @notice The payout address of `node` changed.
    event PayoutChanged(address indexed node, address payout);
    /// @notice `amount` wei of `node`'s stake went to `treasury`; `evidenceHash` names the evidence.
    event Slashed(
        address indexed node, uint256 amount, bytes32 indexed evidenceHash, address treasury
    );

    /// @notice An address argument is zero.
    error ZeroAddress();
    /// @notice An amount argument is zero.
    error ZeroAmount();
    /// @notice `node` is already registered (or retired by a key rotation).
    error NodeAlreadyRegistered(address node);
    /// @notice `node` is not registered.
    error NodeNotRegistered(address node);
    /// @notice `caller` is not the operator of `node`.
    error NotOperator(address node, address caller);
    /// @notice A node's first stake must reach the minimum stake.
    error StakeBelowMinimum(address node, uint256 staked, uint256 minStake);
    /// @notice `amount` is more than the `available` balance.
    error InsufficientStake(address node, uint256 amount, uint256 available);
    /// @notice Nothing is unbonding for `node`.
    error NothingToWithdraw(address node);
    /// @notice The unbonding period of `node` ends at `readyAt`.
    error StillUnbonding(address node, uint64 readyAt);

    /// @notice The role allowed to slash (the Timelock).
    function SLASHER_ROLE() external view returns (bytes32);

    /// @notice Registers `node` (hot key) with msg.sender as operator and `payout` for rewards.
    function register(address node, address payout) external;

    /// @notice Adds msg.value to `node`'s stake. The node's total must reach the minimum stake.
    function stake(address node) external payable;

    /// @notice Moves `amount` from staked to unbonding and restarts the unbonding delay for the
    /// whole unbonding balance. Only the operator.
    function requestUnstake(address node, uint256 amount) external;

    /// @notice Sends the whole unbonding balance to the operator once the delay has passed.
    function withdraw(address node) external;

    /// @notice Moves the node record to a fresh key; the old key can never be registered again.
    function rotateNodeKey(address oldNode, address newNode) external;

    /// @notice Sets where `node`'s rewards go. Only the operator.
    function setPayout(address node, address payout) external;

    /// @notice Takes `amount` from `node` (staked first, then unbonding) and sends it to the
    /// treasury. Only SLASHER_ROLE.
    function slash(address node, uint256 amount, bytes32 evidenceHash) external;

    /// @notice The record of `node`.
    function nodes(address node)
        external
        view
        returns (
            address operator,
            address payout,
            uint256 staked,
            uint256 unbonding,
            uint64 unbondingReadyAt
        );

    /// @notice Whether `node` is registered and its stake reaches TrainingConfig's minStake.
    function isActive(address node) external view returns (bool);

    /// @notice Where `node`'s rewards go (zero if not registered).
    function payoutOf(address node) external view returns (address);
}
