// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {ComputeAttestation} from "./IContributionLedger.sol";

/// @title IGovernanceLatency
/// @notice The longest time governance needs to act (voting delay + period + late-quorum
/// extension + timelock delay), in seconds. The StakeManager keeps unbonding longer than this
/// plus its slash dispute window, so stake cannot leave before a slash can land.
interface IGovernanceLatency {
    /// @notice Seconds from a proposal to its earliest execution, worst case.
    function governanceLatency() external view returns (uint256);
}

/// @title IStakeManager
/// @notice Node registry and native-currency stake. A node has a stable id (assigned at
/// registration, kept across key rotations) and a hot signing key; an operator registers it with
/// the key's EIP-712 proof of possession, stakes for it and names a cold payout address.
/// Unstaking goes through an unbonding delay during which the stake can still be slashed.
/// @dev Trust bounds other contracts build on:
/// - Slashing is optimistic: SLASHER_ROLE proposes (the node's stake freezes at once), anyone
///   executes after `slashDisputeWindow` unless the guardian or governance vetoes. Equivocation
///   (two signed attestations of one key for one (runId, round)) is slashed by anyone at once.
/// - Slashed funds go to `treasury`, which can never hold SLASHER_ROLE or GUARDIAN_ROLE or be the
///   admin.
/// - The guardian can pause `withdraw` and veto slashes, never move funds.
interface IStakeManager {
    /// @notice What a node key signs (EIP-712, domain "coloco"/"1" of this contract) to prove it
    /// consents to be bound to `operator` with rewards to `payout`.
    struct NodeKeyProof {
        address operator;
        address payout;
        uint256 nonce;
        uint256 deadline;
    }

    /// @notice A pending or settled slash proposal.
    struct SlashProposal {
        uint64 nodeId;
        uint64 executableAt;
        uint8 status; // 1 pending, 2 executed, 3 vetoed
        address reporter;
        uint96 amount;
        bytes32 evidenceHash;
    }

    /// @notice `operator` registered `node` (id `nodeId`) with rewards going to `payout`.
    event NodeRegistered(
        address indexed node, address indexed operator, address payout, uint64 nodeId
    );
    /// @notice `amount` wei was staked for `node`; `staked` is the new total.
    event Staked(address indexed node, address indexed from, uint256 amount, uint256 staked);
    /// @notice `amount` moved from staked to unbonding; withdrawable from `readyAt`.
    event UnstakeRequested(address indexed node, uint256 amount, uint256 unbonding, uint64 readyAt);
    /// @notice The unbonded `amount` was sent to `to`.
    event Withdrawn(address indexed node, address indexed to, uint256 amount);
    /// @notice The operator moved node `nodeId` from `oldNode` to `newNode`.
    event NodeKeyRotated(address indexed oldNode, address indexed newNode, uint64 nodeId);
    /// @notice The payout address of `node` changed.
    event PayoutChanged(address indexed node, address payout);
    /// @notice A slash of node `nodeId` was proposed; its stake is frozen until it settles.
    event SlashProposed(
        uint256 indexed proposalId,
        uint64 indexed nodeId,
        uint256 amount,
        bytes32 evidenceHash,
        address reporter,
        uint64 executableAt
    );
    /// @notice Slash proposal `proposalId` was vetoed by `by`.
    event SlashVetoed(uint256 indexed proposalId, address indexed by);
    /// @notice `amount` wei of node `nodeId`'s stake left: `reporterShare` to `reporter`, the rest
    /// to `treasury`. `evidenceHash` names the evidence.
    event Slashed(
        uint64 indexed nodeId,
        uint256 amount,
        bytes32 indexed evidenceHash,
        address reporter,
        uint256 reporterShare,
        address treasury
    );
    /// @notice A governed parameter changed.
    event ParameterSet(bytes32 indexed name, uint256 value);

    /// @notice An address argument is zero.
    error ZeroAddress();
    /// @notice An amount argument is zero.
    error ZeroAmount();
    /// @notice `node` is already registered (or retired by a key rotation).
    error NodeAlreadyRegistered(address node);
    /// @notice `node` is not registered (or was rotated away).
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
    /// @notice The key proof expired at `deadline`.
    error ProofExpired(uint256 deadline);
    /// @notice The key proof is malformed.
    error InvalidKeyProof(bytes signature);
    /// @notice The key proof recovers to `signer`, not to `node`.
    error WrongKeySigner(address signer, address node);
    /// @notice `node` has a pending slash: its stake and key are frozen.
    error NodeFrozen(address node);
    /// @notice No pending slash proposal `proposalId`.
    error NotPendingSlash(uint256 proposalId);
    /// @notice Slash proposal `proposalId` can be executed from `executableAt`.
    error SlashNotReady(uint256 proposalId, uint64 executableAt);
    /// @notice The two attestations are not an equivocation (different key, run or round, or
    /// the same content).
    error NotEquivocation();
    /// @notice Node `nodeId` was already slashed for equivocating in (`runId`, `round`).
    error EquivocationAlreadySlashed(uint64 nodeId, bytes32 runId, uint64 round);
    /// @notice The treasury may not be `account` (the admin/executor, a slasher, the guardian or
    /// zero).
    error InvalidTreasury(address account);
    /// @notice `caller` is neither the guardian nor governance.
    error NotGuardian(address caller);
    /// @notice A governed parameter is out of its bounds.
    error InvalidParameter(bytes32 name, uint256 value);
    /// @notice `unbondingDelay` is below governance latency + slash dispute window (`needed`).
    error UnbondingTooShort(uint256 unbondingDelay, uint256 needed);

    /// @notice The role allowed to propose slashes (the Timelock).
    function SLASHER_ROLE() external view returns (bytes32);

    /// @notice The role allowed to pause withdrawals and veto slashes.
    function GUARDIAN_ROLE() external view returns (bytes32);

    /// @notice Registers `node` (hot key) with msg.sender as operator and `payout` for rewards.
    /// `signature`: the node key's EIP-712 `NodeKeyProof(msg.sender, payout, nonces(node),
    /// deadline)`.
    function register(address node, address payout, uint256 deadline, bytes calldata signature)
        external;

    /// @notice Adds msg.value to `node`'s stake. The node's total must reach the minimum stake.
    function stake(address node) external payable;

    /// @notice Moves `amount` from staked to unbonding and restarts the unbonding delay for the
    /// whole unbonding balance. Only the operator; not while frozen.
    function requestUnstake(address node, uint256 amount) external;

    /// @notice Sends the whole unbonding balance to the operator once the delay has passed.
    /// Only the operator; not while frozen or paused.
    function withdraw(address node) external;

    /// @notice Moves the node to a fresh key, proven by the new key's `NodeKeyProof(msg.sender,
    /// payout, nonces(newNode), deadline)`; the old key can never be registered again. The node
    /// id (and any slash against it) stays.
    function rotateNodeKey(
        address oldNode,
        address newNode,
        uint256 deadline,
        bytes calldata signature
    ) external;

    /// @notice Sets where `node`'s rewards go. Only the operator.
    function setPayout(address node, address payout) external;

    /// @notice Proposes to take `amount` from the node of key `node` (current or retired);
    /// freezes its stake until executed or vetoed. Only SLASHER_ROLE.
    function proposeSlash(address node, uint256 amount, bytes32 evidenceHash, address reporter)
        external
        returns (uint256 proposalId);

    /// @notice Executes a pending slash after its dispute window: takes min(amount, staked +
    /// unbonding). Anyone.
    function executeSlash(uint256 proposalId) external returns (uint256 amount);

    /// @notice Vetoes a pending slash. The guardian or governance.
    function vetoSlash(uint256 proposalId) external;

    /// @notice Slashes `equivocationSlashBps` of the signer's stake at once when `a` and `b` are
    /// both validly signed by the same node key for the same (runId, round) with different
    /// content; pays the reporter (msg.sender) its share. Anyone.
    function reportEquivocation(
        ComputeAttestation calldata a,
        bytes calldata sigA,
        ComputeAttestation calldata b,
        bytes calldata sigB
    ) external returns (uint256 amount);

    /// @notice The EIP-712 digest a node key signs to be bound to `operator` and `payout`.
    function hashNodeKeyProof(NodeKeyProof calldata proof) external view returns (bytes32);

    /// @notice The record of `node` (zeros if the key is not a current node key).
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

    /// @notice The stable id of key `node` (also for retired keys; 0: never registered).
    function nodeIdOf(address node) external view returns (uint64);

    /// @notice Whether `node` is a current node key, registered, and its stake reaches minStake.
    function isActive(address node) external view returns (bool);

    /// @notice Whether the node of key `node` has a pending slash.
    function isFrozen(address node) external view returns (bool);

    /// @notice Where `node`'s rewards go (zero if not a current node key).
    function payoutOf(address node) external view returns (address);

    /// @notice The unbonding delay applied now: max(`unbondingDelay`, governance latency +
    /// `slashDisputeWindow`).
    function effectiveUnbondingDelay() external view returns (uint256);
}
