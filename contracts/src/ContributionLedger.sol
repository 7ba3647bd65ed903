// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {ComputeAttestation, IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {IOwnershipSplit} from "./interfaces/IOwnershipSplit.sol";
import {ITrainingConfig} from "./interfaces/ITrainingConfig.sol";

/// @title ContributionLedger
/// @notice Round commitments of the ledger operator, the reward budget they carry, the dispute
/// window of rewards roots, and the EIP-712 domain of attestations.
/// @dev `commitRound` writes at most four slots whatever the number of nodes in the round: the
/// run's (lastRound, committed) slot, the round's checkpoint, the packed globals (pause flag,
/// budget, root count, window, skip) and, for a non-zero rewards root, its RootInfo. Everything
/// else travels in the `RoundCommitted` event.
contract ContributionLedger is IContributionLedger, AccessControl, EIP712, Pausable {
    /// @inheritdoc IContributionLedger
    bytes32 public constant COMMITTER_ROLE = keccak256("COMMITTER_ROLE");
    /// @inheritdoc IContributionLedger
    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");

    /// @inheritdoc IContributionLedger
    bytes32 public constant ATTESTATION_TYPEHASH = keccak256(
        "ComputeAttestation(bytes32 runId,uint64 round,address node,uint64 configVersion,"
        "bytes32 baseCheckpoint,bytes32 pseudoGradient,bytes32 dataShard,uint32 innerSteps,"
        "uint64 tokens,bytes32 resultCheckpoint,bytes32 traceRoot)"
    );

    /// @notice Shortest dispute window governance may set: one second (devnets).
    uint64 public constant MIN_DISPUTE_WINDOW = 1;
    /// @notice Longest dispute window: 30 days.
    uint64 public constant MAX_DISPUTE_WINDOW = 30 days;
    /// @notice Upper bound on `maxRoundSkip`.
    uint32 public constant MAX_ROUND_SKIP_LIMIT = 1_000_000;

    /// @dev Packed in one slot: the last committed round, whether any commit exists and the
    /// compute budget committed for the run (what the code and capital pools are sized by).
    struct RunState {
        uint64 lastRound;
        bool committed;
        uint128 budget;
    }

    /// @notice Where the governed `rewardPerRound` is read.
    ITrainingConfig public immutable config;

    // Declared first so they share one slot with Pausable's `_paused` (the last base): a
    // commit reads the pause flag, budget, root count, window and skip with one SLOAD.
    uint128 private _totalBudget;
    uint32 private _rootCount;
    uint32 private _disputeWindow;
    uint32 private _maxRoundSkip;

    mapping(bytes32 runId => RunState) private _runs;
    mapping(bytes32 runId => mapping(uint64 round => bytes32)) private _checkpoints;
    mapping(bytes32 root => RootInfo) private _roots;

    /// @param admin Holder of DEFAULT_ADMIN_ROLE (grants COMMITTER/GUARDIAN; the Timelock).
    /// @param config_ The TrainingConfig whose compute pool (`poolRewards()`, rewardPerRound times
    /// the compute share) caps each commit's reward total.
    /// @param disputeWindow_ Seconds a new rewards root stays pending.
    /// @param maxRoundSkip_ Largest `round - lastRound` of a commit.
    constructor(address admin, ITrainingConfig config_, uint64 disputeWindow_, uint32 maxRoundSkip_)
        EIP712("coloco", "1")
    {
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        config = config_;
        _setDisputeWindow(disputeWindow_);
        _setMaxRoundSkip(maxRoundSkip_);
    }

    modifier onlyGuardianOrAdmin() {
        if (!hasRole(GUARDIAN_ROLE, msg.sender) && !hasRole(DEFAULT_ADMIN_ROLE, msg.sender)) {
            revert NotGuardian(msg.sender);
        }
        _;
    }

    /// @inheritdoc IContributionLedger
    function commitRound(
        bytes32 runId,
        uint64 round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot,
        uint256 rewardTotal
    ) external onlyRole(COMMITTER_ROLE) whenNotPaused {
        RunState memory run = _runs[runId];
        if (!run.committed) {
            if (round != 0) revert GenesisNotZero(runId, round);
        } else {
            if (round <= run.lastRound) revert RoundNotIncreasing(runId, round, run.lastRound);
            uint32 maxSkip = _maxRoundSkip;
            if (round - run.lastRound > maxSkip) {
                revert RoundSkipTooLarge(runId, round, run.lastRound, maxSkip);
            }
        }
        if (checkpointHash == bytes32(0)) revert ZeroCheckpoint(runId, round);
        if (rewardTotal != 0) {
            // the compute pool's share of rewardPerRound (code and capital pools pay their own)
            (uint256 perRound,,) = IOwnershipSplit(address(config)).poolRewards();
            if (rewardTotal > perRound) revert RewardAboveBudget(rewardTotal, perRound);
            if (rewardsRoot == bytes32(0)) revert RewardWithoutRoot(rewardTotal);
        }
        // rewardTotal <= rewardPerRound <= 1e24: SafeCast reverts long before a real overflow.
        _runs[runId] = RunState({
            lastRound: round, committed: true, budget: SafeCast.toUint128(run.budget + rewardTotal)
        });
        _checkpoints[runId][round] = checkpointHash;
        if (rewardsRoot != bytes32(0)) {
            RootInfo memory info = _roots[rewardsRoot];
            if (info.revoked) revert RootIsRevoked(rewardsRoot);
            if (info.index == 0) {
                uint128 budget = SafeCast.toUint128(_totalBudget + rewardTotal);
                uint32 index = _rootCount + 1;
                _rootCount = index;
                info.index = index;
                // forge-lint: disable-next-line(block-timestamp)
                info.finalizedAt = uint64(block.timestamp) + _disputeWindow;
                info.budget = budget;
                _roots[rewardsRoot] = info;
                if (rewardTotal != 0) _totalBudget = budget;
            } else if (rewardTotal != 0) {
                // a repeated root pays the same tree: new budget needs a new, pending root
                revert RepeatedRootWithBudget(rewardsRoot, rewardTotal);
            }
            // a repeated root (a round that added no reward) keeps its finality and budget
        }
        emit RoundCommitted(
            runId, round, rewardsRoot, checkpointHash, totalWork, attestationsRoot, rewardTotal
        );
    }

    /// @inheritdoc IContributionLedger
    function revokeRoot(bytes32 root) external onlyGuardianOrAdmin {
        RootInfo memory info = _roots[root];
        if (info.index == 0) revert UnknownRoot(root);
        if (info.revoked) revert RootIsRevoked(root);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp >= info.finalizedAt) revert RootFinalized(root, info.finalizedAt);
        _roots[root].revoked = true;
        emit RootRevoked(root, msg.sender);
    }

    /// @inheritdoc IContributionLedger
    function setDisputeWindow(uint64 disputeWindow_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setDisputeWindow(disputeWindow_);
    }

    /// @inheritdoc IContributionLedger
    function setMaxRoundSkip(uint32 maxRoundSkip_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setMaxRoundSkip(maxRoundSkip_);
    }

    /// @inheritdoc IContributionLedger
    function pause() external onlyGuardianOrAdmin {
        _pause();
    }

    /// @inheritdoc IContributionLedger
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @inheritdoc IContributionLedger
    function rootInfo(bytes32 root) external view returns (RootInfo memory) {
        return _roots[root];
    }

    /// @inheritdoc IContributionLedger
    function claimable(bytes32 root) external view returns (uint32 index, uint256 budget) {
        RootInfo memory info = _roots[root];
        if (info.index == 0) revert UnknownRoot(root);
        if (info.revoked) revert RootIsRevoked(root);
        // forge-lint: disable-next-line(block-timestamp)
        if (block.timestamp < info.finalizedAt) revert RootPending(root, info.finalizedAt);
        return (info.index, info.budget);
    }

    /// @inheritdoc IContributionLedger
    function totalBudget() external view returns (uint256) {
        return _totalBudget;
    }

    /// @inheritdoc IContributionLedger
    function disputeWindow() external view returns (uint64) {
        return _disputeWindow;
    }

    /// @inheritdoc IContributionLedger
    function maxRoundSkip() external view returns (uint32) {
        return _maxRoundSkip;
    }

    /// @inheritdoc IContributionLedger
    function rootCount() external view returns (uint32) {
        return _rootCount;
    }

    /// @inheritdoc IContributionLedger
    function lastRound(bytes32 runId) external view returns (uint64) {
        return _runs[runId].lastRound;
    }

    /// @inheritdoc IContributionLedger
    function runBudget(bytes32 runId) external view returns (uint256) {
        return _runs[runId].budget;
    }

    /// @inheritdoc IContributionLedger
    function hasCommitted(bytes32 runId) external view returns (bool) {
        return _runs[runId].committed;
    }

    /// @inheritdoc IContributionLedger
    function checkpointOf(bytes32 runId, uint64 round) external view returns (bytes32) {
        return _checkpoints[runId][round];
    }

    /// @inheritdoc IContributionLedger
    function hashAttestation(ComputeAttestation calldata att) public view returns (bytes32) {
        return _hashTypedDataV4(
            keccak256(
                abi.encode(
                    ATTESTATION_TYPEHASH,
                    att.runId,
                    att.round,
                    att.node,
                    att.configVersion,
                    att.baseCheckpoint,
                    att.pseudoGradient,
                    att.dataShard,
                    att.innerSteps,
                    att.tokens,
                    att.resultCheckpoint,
                    att.traceRoot
                )
            )
        );
    }

    /// @inheritdoc IContributionLedger
    function verifyAttestation(ComputeAttestation calldata att, bytes calldata signature)
        external
        view
        returns (address signer)
    {
        ECDSA.RecoverError err;
        (signer, err,) = ECDSA.tryRecover(hashAttestation(att), signature);
        if (err != ECDSA.RecoverError.NoError) revert InvalidSignature(signature);
        if (signer != att.node) revert WrongSigner(signer, att.node);
    }

    function _setDisputeWindow(uint64 disputeWindow_) private {
        if (disputeWindow_ < MIN_DISPUTE_WINDOW || disputeWindow_ > MAX_DISPUTE_WINDOW) {
            revert InvalidDisputeWindow(disputeWindow_);
        }
        // MAX_DISPUTE_WINDOW (30 days) fits in 32 bits
        // forge-lint: disable-next-line(unsafe-typecast)
        _disputeWindow = uint32(disputeWindow_);
        emit DisputeWindowSet(disputeWindow_);
    }

    function _setMaxRoundSkip(uint32 maxRoundSkip_) private {
        if (maxRoundSkip_ == 0 || maxRoundSkip_ > MAX_ROUND_SKIP_LIMIT) {
            revert InvalidMaxRoundSkip(maxRoundSkip_);
        }
        _maxRoundSkip = maxRoundSkip_;
        emit MaxRoundSkipSet(maxRoundSkip_);
    }
}
