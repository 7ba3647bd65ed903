// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title ICodeRegistry
/// @notice Code contributions to training runs. Anyone submits one for a run (repository URI,
/// commit hash, description URI); a review committee that governance appoints and replaces
/// approves an amount of ownership tokens from the run's code pool, within a budget per period
/// and up to a threshold, or rejects it with a reason; amounts above the threshold need a full
/// governance vote. An approved contributor claims its tokens. Every decision is an event with
/// the contribution's id. The code pool of a run is the compute budget the ContributionLedger
/// committed for it (`runBudget`) times code/compute (TrainingConfig's `poolRewards()`): one
/// round's code share per round that paid the full compute pool, nothing for skipped rounds or
/// rounds without rewards. A member never approves its own submission (`SelfApproval`).
interface ICodeRegistry {
    /// @notice Where a contribution stands.
    enum Status {
        None,
        Pending,
        Approved,
        Rejected,
        Claimed
    }

    /// @notice `contributor` submitted contribution `id` to `runId`.
    /// @param commitHash The commit: a git SHA-1 left-aligned, or a SHA-256.
    event Submitted(
        uint256 indexed id,
        bytes32 indexed runId,
        address indexed contributor,
        string repositoryUri,
        bytes32 commitHash,
        string descriptionUri
    );
    /// @notice Contribution `id` was approved for `amount` tokens, by the committee or by a vote.
    event Approved(uint256 indexed id, bytes32 indexed runId, uint256 amount, bool byVote);
    /// @notice Contribution `id` was rejected by `by`, for `reason`.
    event Rejected(uint256 indexed id, bytes32 indexed runId, address by, string reason);
    /// @notice The tokens of contribution `id` were minted to `contributor`.
    event CodeClaimed(uint256 indexed id, address indexed contributor, uint256 amount);
    /// @notice Governance set the committee's budget: `capacity` tokens per `period` seconds.
    event CommitteeBudgetSet(uint256 capacity, uint48 period);
    /// @notice Governance set the amount above which an approval needs a full vote.
    event VoteThresholdSet(uint256 threshold);

    /// @notice The ContributionLedger has no commit for `runId`.
    error UnknownRun(bytes32 runId);
    /// @notice URIs must be 1..`MAX_URI_LENGTH` bytes and the commit hash non-zero.
    error InvalidSubmission(
        uint256 repositoryUriLength, bytes32 commitHash, uint256 descriptionUriLength
    );
    /// @notice No contribution has id `id`.
    error UnknownContribution(uint256 id);
    /// @notice Contribution `id` was already decided (`status` is not Pending).
    error AlreadyDecided(uint256 id, Status status);
    /// @notice An approval of zero tokens (or above 2**88 - 1).
    error InvalidAmount(uint256 amount);
    /// @notice `amount` is above `threshold`: only a governance vote may approve it.
    error AmountNeedsVote(uint256 amount, uint256 threshold);
    /// @notice `amount` is above what the committee may still approve this period, `available`.
    error CommitteeBudgetExceeded(uint256 amount, uint256 available);
    /// @notice Approving would bring the run's approvals to `approved`, above its code pool `pool`.
    error CodePoolExceeded(bytes32 runId, uint256 approved, uint256 pool);
    /// @notice A rejection needs a reason of 1..`MAX_URI_LENGTH` bytes.
    error InvalidReason(uint256 length);
    /// @notice Contribution `id` is not approved-and-unclaimed (`status`).
    error NotClaimable(uint256 id, Status status);
    /// @notice Committee member `approver` submitted contribution `id`: another member or a
    /// governance vote must approve it.
    error SelfApproval(uint256 id, address approver);
    /// @notice A committee budget needs a non-zero period.
    error InvalidBudget(uint256 capacity, uint48 period);

    /// @notice Submits a contribution to `runId`. Anyone.
    /// @return id The contribution's id (1, 2, ...).
    function submit(
        bytes32 runId,
        string calldata repositoryUri,
        bytes32 commitHash,
        string calldata descriptionUri
    ) external returns (uint256 id);

    /// @notice Approves `amount` tokens for contribution `id`. Only COMMITTEE_ROLE, at most the
    /// vote threshold, within the committee's budget and the run's code pool; never the
    /// submission's own contributor.
    function approve(uint256 id, uint256 amount) external;

    /// @notice Approves `amount` tokens for contribution `id` after a governance vote. Only
    /// governance; within the run's code pool.
    function approveByVote(uint256 id, uint256 amount) external;

    /// @notice Rejects contribution `id` for `reason`. COMMITTEE_ROLE or governance.
    function reject(uint256 id, string calldata reason) external;

    /// @notice Mints contribution `id`'s approved tokens to its contributor. Anyone may call.
    function claim(uint256 id) external returns (uint256 amount);

    /// @notice Tokens the code pool of `runId` holds so far (approved or not).
    function codePool(bytes32 runId) external view returns (uint256);
}
