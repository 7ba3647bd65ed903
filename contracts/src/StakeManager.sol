// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";
import {Address} from "@openzeppelin/contracts/utils/Address.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {ITrainingConfig} from "./interfaces/ITrainingConfig.sol";

/// @title StakeManager
/// @notice Node registry and native-currency stake with an unbonding delay and slashing.
/// @dev Native currency leaves only in `withdraw` (to the operator) and `slash` (to the treasury),
/// both nonReentrant and both after every state write (checks-effects-interactions).
/// Balances are uint96 (7.9e28 wei, far above any native supply) so a node fits in two slots.
contract StakeManager is IStakeManager, AccessControl, ReentrancyGuard {
    /// @inheritdoc IStakeManager
    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");

    /// @dev slot 0: operator + unbondingReadyAt; slot 1: payout + staked; slot 2: unbonding.
    struct Node {
        address operator;
        uint64 unbondingReadyAt;
        address payout;
        uint96 staked;
        uint96 unbonding;
    }

    /// @notice Where the TrainingConfig minimum stake is read.
    ITrainingConfig public immutable config;
    /// @notice Where slashed stake goes.
    address public immutable treasury;
    /// @notice Seconds between `requestUnstake` and `withdraw`.
    uint64 public immutable unbondingDelay;

    mapping(address node => Node) private _nodes;
    /// @notice Keys rotated away from; they can never be registered again.
    mapping(address node => bool) public retired;

    /// @param admin Holder of DEFAULT_ADMIN_ROLE (the Timelock after setup).
    /// @param config_ The TrainingConfig whose `minStake` gates staking and activity.
    /// @param treasury_ Receiver of slashed stake (never the slasher).
    /// @param unbondingDelay_ Unbonding delay in seconds.
    constructor(address admin, ITrainingConfig config_, address treasury_, uint64 unbondingDelay_) {
        if (treasury_ == address(0) || address(config_) == address(0)) revert ZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        config = config_;
        treasury = treasury_;
        unbondingDelay = unbondingDelay_;
    }

    modifier onlyOperator(address node) {
        address operator = _nodes[node].operator;
        if (operator == address(0)) revert NodeNotRegistered(node);
        if (operator != msg.sender) revert NotOperator(node, msg.sender);
        _;
    }

    /// @inheritdoc IStakeManager
    function register(address node, address payout) external {
        if (node == address(0) || payout == address(0)) revert ZeroAddress();
        if (_nodes[node].operator != address(0) || retired[node]) {
            revert NodeAlreadyRegistered(node);
        }
        _nodes[node].operator = msg.sender;
        _nodes[node].payout = payout;
        emit NodeRegistered(node, msg.sender, payout);
    }

    /// @inheritdoc IStakeManager
    function stake(address node) external payable {
        if (msg.value == 0) revert ZeroAmount();
        Node storage n = _nodes[node];
        if (n.operator == address(0)) revert NodeNotRegistered(node);
        uint256 total = n.staked + msg.value;
        uint256 minimum = config.minStake();
        if (total < minimum) revert StakeBelowMinimum(node, total, minimum);
        n.staked = SafeCast.toUint96(total);
        emit Staked(node, msg.sender, msg.value, total);
    }

    /// @inheritdoc IStakeManager
    function requestUnstake(address node, uint256 amount) external onlyOperator(node) {
        if (amount == 0) revert ZeroAmount();
        Node storage n = _nodes[node];
        uint256 staked = n.staked;
        if (amount > staked) revert InsufficientStake(node, amount, staked);
        uint256 unbonding = n.unbonding + amount;
        uint64 readyAt = uint64(block.timestamp) + unbondingDelay;
        // casting to 'uint96' is safe because amount <= staked, itself a uint96
        // forge-lint: disable-next-line(unsafe-typecast)
        n.staked = uint96(staked - amount);
        n.unbonding = SafeCast.toUint96(unbonding);
        n.unbondingReadyAt = readyAt;
        emit UnstakeRequested(node, amount, unbonding, readyAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw(address node) external nonReentrant onlyOperator(node) {
        Node storage n = _nodes[node];
        uint256 amount = n.unbonding;
        if (amount == 0) revert NothingToWithdraw(node);
        // Unbonding lasts days; a validator's few seconds of timestamp drift do not matter.
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < n.unbondingReadyAt) revert StillUnbonding(node, n.unbondingReadyAt);
        n.unbonding = 0;
        n.unbondingReadyAt = 0;
        emit Withdrawn(node, msg.sender, amount);
        Address.sendValue(payable(msg.sender), amount);
    }

    /// @inheritdoc IStakeManager
    function rotateNodeKey(address oldNode, address newNode) external onlyOperator(oldNode) {
        if (newNode == address(0)) revert ZeroAddress();
        if (_nodes[newNode].operator != address(0) || retired[newNode]) {
            revert NodeAlreadyRegistered(newNode);
        }
        _nodes[newNode] = _nodes[oldNode];
        delete _nodes[oldNode];
        retired[oldNode] = true;
        emit NodeKeyRotated(oldNode, newNode);
    }

    /// @inheritdoc IStakeManager
    function setPayout(address node, address payout) external onlyOperator(node) {
        if (payout == address(0)) revert ZeroAddress();
        _nodes[node].payout = payout;
        emit PayoutChanged(node, payout);
    }

    /// @inheritdoc IStakeManager
    function slash(address node, uint256 amount, bytes32 evidenceHash)
        external
        nonReentrant
        onlyRole(SLASHER_ROLE)
    {
        if (amount == 0) revert ZeroAmount();
        Node storage n = _nodes[node];
        if (n.operator == address(0)) revert NodeNotRegistered(node);
        uint256 staked = n.staked;
        uint256 unbonding = n.unbonding;
        if (amount > staked + unbonding) {
            revert InsufficientStake(node, amount, staked + unbonding);
        }
        uint256 fromStaked = amount < staked ? amount : staked;
        // fromStaked <= staked and amount - fromStaked <= unbonding (checked above): no underflow.
        // Both results are at most their uint96 starting values, so the casts are safe.
        unchecked {
            // forge-lint: disable-next-line(unsafe-typecast)
            n.staked = uint96(staked - fromStaked);
            // forge-lint: disable-next-line(unsafe-typecast)
            n.unbonding = uint96(unbonding - (amount - fromStaked));
        }
        emit Slashed(node, amount, evidenceHash, treasury);
        Address.sendValue(payable(treasury), amount);
    }

    /// @inheritdoc IStakeManager
    function nodes(address node)
        external
        view
        returns (
            address operator,
            address payout,
            uint256 staked,
            uint256 unbonding,
            uint64 unbondingReadyAt
        )
    {
        Node storage n = _nodes[node];
        return (n.operator, n.payout, n.staked, n.unbonding, n.unbondingReadyAt);
    }

    /// @inheritdoc IStakeManager
    function isActive(address node) external view returns (bool) {
        Node storage n = _nodes[node];
        return n.operator != address(0) && n.staked >= config.minStake();
    }

    /// @inheritdoc IStakeManager
    function payoutOf(address node) external view returns (address) {
        return _nodes[node].payout;
    }
}
