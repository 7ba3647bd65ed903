// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @notice What a trainer node signs (EIP-712) for one outer round. Field order is part of the
/// type hash: see docs/interfaces.md.
struct ComputeAttestation {
    bytes32 runId;
    uint64 round;
    address node;
    uint64 configVersion;
    bytes32 baseCheckpoint;
    bytes32 pseudoGradient;
    bytes32 dataShard;
    uint32 innerSteps;
    uint64 tokens;
    bytes32 resultCheckpoint;
    /// @dev Merkle root of the round's boundary states (every traceInterval inner steps).
    bytes32 traceRoot;
}

/// @title IContributionLedger
/// @notice One commitment per (run, round) from the ledger operator: the cumulative rewards root,
/// the round's reward total (its budget), the resulting checkpoint and a root over the round's
/// attestations. Also the EIP-712 domain (name "coloco", version "1") of `ComputeAttestation`.
/// @dev Trust bounds other contracts build on:
/// - Budget: every commit adds `rewardTotal` <= the compute pool per round (TrainingConfig
///   `poolRewards()`: rewardPerRound times the compute share) to `totalBudget`
///   and records it as the root's `budget`. A payer claiming against a root never lets its total
///   paid exceed that root's budget, so the total paid never exceeds the committed budget. A
///   revoked root's budget stays committed: the honest replacement root carries the same work.
/// - Finality: a rewards root is pending for `disputeWindow` seconds after its first commit; the
///   guardian (GUARDIAN_ROLE) or governance (DEFAULT_ADMIN_ROLE) may revoke it while pending. A
///   root committed again keeps its finality and its budget and may carry no new reward
///   (`RepeatedRootWithBudget`): new budget always waits behind a new, pending root.
/// - Per run: `runBudget(runId)` sums the run's committed reward totals; the code and capital
///   pools of a run are sized by it, never by its round numbers.
///   `claimable(root)` reverts unless the root is finalized and not revoked.
/// - Pause: the guardian can pause commits (never move funds); only governance unpauses.
interface IContributionLedger {
    /// @notice Finality record of a rewards root (one storage slot).
    /// @param index 1-based order of first commit (0: unknown root).
    /// @param finalizedAt When the root becomes claimable (unix seconds).
    /// @param revoked Whether the root was revoked while pending (it never pays).
    /// @param budget `totalBudget` after this root's first commit (a repeat never changes it):
    /// what all claims together may reach when paying against this root.
    struct RootInfo {
        uint32 index;
        uint64 finalizedAt;
        bool revoked;
        uint128 budget;
    }

    /// @notice A round was committed. Carries everything an indexer needs.
    /// @param runId The run.
    /// @param round The outer round (0 = genesis).
    /// @param rewardsRoot Root of the cumulative rewards tree (zero: no rewards settled yet).
    /// @param checkpointHash Canonical hash of the weights after this round.
    /// @param totalWork Verified work credited in this round (ledger units).
    /// @param attestationsRoot Root over the attestations accepted for this round.
    /// @param rewardTotal Tokens this round adds to the reward budget.
    event RoundCommitted(
        bytes32 indexed runId,
        uint64 indexed round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot,
        uint256 rewardTotal
    );
    /// @notice A pending rewards root was revoked by `by`: it never pays.
    event RootRevoked(bytes32 indexed root, address indexed by);
    /// @notice Governance set the dispute window (seconds).
    event DisputeWindowSet(uint64 disputeWindow);
    /// @notice Governance set the largest allowed round skip.
    event MaxRoundSkipSet(uint32 maxRoundSkip);

    /// @notice `round` is not above the run's last committed round.
    error RoundNotIncreasing(bytes32 runId, uint64 round, uint64 lastRound);
    /// @notice A run's first commit must be round 0 (genesis).
    error GenesisNotZero(bytes32 runId, uint64 round);
    /// @notice `round` skips more than `maxRoundSkip` rounds past `lastRound`.
    error RoundSkipTooLarge(bytes32 runId, uint64 round, uint64 lastRound, uint32 maxRoundSkip);
    /// @notice A commit must carry a non-zero checkpoint hash.
    error ZeroCheckpoint(bytes32 runId, uint64 round);
    /// @notice The commit's `rewardTotal` is above the compute pool per round (`rewardPerRound`
    /// times the compute share of the ownership split).
    error RewardAboveBudget(uint256 rewardTotal, uint256 rewardPerRound);
    /// @notice Rewards were committed without a rewards root to pay them.
    error RewardWithoutRoot(uint256 rewardTotal);
    /// @notice `root` was committed before: it keeps its finality and budget, so it may not
    /// carry `rewardTotal` again. Commit the new reward under the new cumulative root.
    error RepeatedRootWithBudget(bytes32 root, uint256 rewardTotal);
    /// @notice `root` was never committed.
    error UnknownRoot(bytes32 root);
    /// @notice `root` is still in its dispute window until `finalizedAt`.
    error RootPending(bytes32 root, uint64 finalizedAt);
    /// @notice `root` was revoked and never pays (nor may it be committed again).
    error RootIsRevoked(bytes32 root);
    /// @notice `root` is past its dispute window: it can no longer be revoked.
    error RootFinalized(bytes32 root, uint64 finalizedAt);
    /// @notice `caller` is neither the guardian nor governance.
    error NotGuardian(address caller);
    /// @notice The dispute window is outside [MIN_DISPUTE_WINDOW, MAX_DISPUTE_WINDOW].
    error InvalidDisputeWindow(uint64 disputeWindow);
    /// @notice The maximum round skip is outside [1, MAX_ROUND_SKIP_LIMIT].
    error InvalidMaxRoundSkip(uint32 maxRoundSkip);
    /// @notice The signature is malformed (wrong length or non-canonical s).
    error InvalidSignature(bytes signature);
    /// @notice The signature recovers to `signer`, not to the attestation's `node`.
    error WrongSigner(address signer, address node);

    /// @notice The EIP-712 type hash of `ComputeAttestation`.
    function ATTESTATION_TYPEHASH() external view returns (bytes32);

    /// @notice The role allowed to commit rounds.
    function COMMITTER_ROLE() external view returns (bytes32);

    /// @notice The role allowed to pause commits and revoke pending roots (never to move funds).
    function GUARDIAN_ROLE() external view returns (bytes32);

    /// @notice Commits round `round` of `runId`. Only COMMITTER_ROLE, not while paused. A run's
    /// first commit must be round 0; later rounds increase by 1..`maxRoundSkip`. `rewardTotal`
    /// (<= the compute pool per round) joins `totalBudget`. A non-zero `rewardsRoot` not seen
    /// before becomes pending for `disputeWindow` seconds; a repeated one keeps its finality and
    /// budget and must carry `rewardTotal` 0 (`RepeatedRootWithBudget`).
    function commitRound(
        bytes32 runId,
        uint64 round,
        bytes32 rewardsRoot,
        bytes32 checkpointHash,
        uint256 totalWork,
        bytes32 attestationsRoot,
        uint256 rewardTotal
    ) external;

    /// @notice Revokes a pending `root`: it never pays (nor may it be committed again).
    /// Only the guardian or governance, only during the dispute window.
    function revokeRoot(bytes32 root) external;

    /// @notice Sets the dispute window in seconds. Only governance.
    function setDisputeWindow(uint64 disputeWindow_) external;

    /// @notice Sets the largest round skip between two commits of a run. Only governance.
    function setMaxRoundSkip(uint32 maxRoundSkip_) external;

    /// @notice Stops `commitRound`. The guardian or governance.
    function pause() external;

    /// @notice Resumes `commitRound`. Only governance.
    function unpause() external;

    /// @notice The finality record of `root` (index 0: never committed).
    function rootInfo(bytes32 root) external view returns (RootInfo memory);

    /// @notice For payers: `root`'s index and budget. Reverts with
    /// `UnknownRoot`, `RootPending` or `RootIsRevoked` unless `root` is claimable now.
    function claimable(bytes32 root) external view returns (uint32 index, uint256 budget);

    /// @notice Sum of every committed reward total.
    function totalBudget() external view returns (uint256);

    /// @notice Seconds a new root stays pending (revocable) before it can pay.
    function disputeWindow() external view returns (uint64);

    /// @notice The largest allowed `round - lastRound` of a commit.
    function maxRoundSkip() external view returns (uint32);

    /// @notice How many distinct rewards roots were committed.
    function rootCount() external view returns (uint32);

    /// @notice The last committed round of `runId` (0 if none: check `hasCommitted`).
    function lastRound(bytes32 runId) external view returns (uint64);

    /// @notice The compute budget committed for `runId`: the sum of its commits' reward totals.
    function runBudget(bytes32 runId) external view returns (uint256);

    /// @notice Whether `runId` has at least one commit.
    function hasCommitted(bytes32 runId) external view returns (bool);

    /// @notice The checkpoint hash committed for (`runId`, `round`), zero if none.
    function checkpointOf(bytes32 runId, uint64 round) external view returns (bytes32);

    /// @notice The EIP-712 digest of `att` under this contract's domain.
    function hashAttestation(ComputeAttestation calldata att) external view returns (bytes32);

    /// @notice Recovers the signer of `att` and checks it is `att.node`; reverts otherwise.
    function verifyAttestation(ComputeAttestation calldata att, bytes calldata signature)
        external
        view
        returns (address signer);
}
