// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {RateLimiter} from "@openzeppelin/contracts/utils/RateLimiter.sol";
import {IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {ICodeRegistry} from "./interfaces/ICodeRegistry.sol";
import {IModelShareToken} from "./interfaces/IModelShareToken.sol";
import {IOwnershipSplit} from "./interfaces/IOwnershipSplit.sol";

/// @title CodeRegistry
/// @notice Code contributions, their review and their payment in ownership tokens.
/// @dev Roles: DEFAULT_ADMIN_ROLE is governance (the Timelock): appoints and replaces the
/// committee (grant/revoke COMMITTEE_ROLE), sets its budget and the vote threshold, approves
/// large amounts. A contribution is one storage slot (contributor, status, amount) plus its run;
/// the URIs live only in the `Submitted` event. The committee's budget is an OpenZeppelin
/// RateLimiter bucket shared by all its members (`capacity` per `period`, refilling linearly).
contract CodeRegistry is ICodeRegistry, AccessControl {
    using RateLimiter for RateLimiter.RefillingBucket;

    /// @notice The review committee's role.
    bytes32 public constant COMMITTEE_ROLE = keccak256("COMMITTEE_ROLE");
    /// @notice Upper bound on a URI or a reason, in bytes.
    uint256 public constant MAX_URI_LENGTH = 512;
    /// @dev The committee's one shared budget bucket.
    bytes32 private constant _BUDGET = bytes32(0);

    /// @dev One slot: who is paid, where the review stands, how much was approved.
    struct Contribution {
        address contributor;
        Status status;
        uint88 amount;
    }

    /// @notice The token minted to approved contributors.
    IModelShareToken public immutable token;
    /// @notice Where a run's committed rounds are read (its code pool grows with them).
    IContributionLedger public immutable ledger;
    /// @notice The governed ownership split (code basis points of the reward per round).
    IOwnershipSplit public immutable config;

    /// @notice Approvals above this need a governance vote (`approveByVote`).
    uint256 public voteThreshold;
    /// @notice The id of the latest contribution (ids start at 1).
    uint256 public lastId;
    /// @notice Tokens approved so far per run.
    mapping(bytes32 runId => uint256) public approvedOf;

    mapping(uint256 id => Contribution) private _contributions;
    mapping(uint256 id => bytes32) private _runOf;
    RateLimiter.RefillingBucket private _budget;

    /// @param admin Governance (the Timelock).
    /// @param committee The first committee members (may be empty).
    constructor(
        IModelShareToken token_,
        IContributionLedger ledger_,
        IOwnershipSplit config_,
        address admin,
        address[] memory committee,
        uint208 budgetPerPeriod,
        uint48 period,
        uint256 voteThreshold_
    ) {
        token = token_;
        ledger = ledger_;
        config = config_;
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        for (uint256 i; i < committee.length; ++i) {
            _grantRole(COMMITTEE_ROLE, committee[i]);
        }
        _setCommitteeBudget(budgetPerPeriod, period);
        voteThreshold = voteThreshold_;
        emit VoteThresholdSet(voteThreshold_);
    }

    /// @inheritdoc ICodeRegistry
    function submit(
        bytes32 runId,
        string calldata repositoryUri,
        bytes32 commitHash,
        string calldata descriptionUri
    ) external returns (uint256 id) {
        uint256 repoLen = bytes(repositoryUri).length;
        uint256 descLen = bytes(descriptionUri).length;
        if (
            repoLen == 0 || repoLen > MAX_URI_LENGTH || descLen == 0 || descLen > MAX_URI_LENGTH
                || commitHash == bytes32(0)
        ) revert InvalidSubmission(repoLen, commitHash, descLen);
        if (!ledger.hasCommitted(runId)) revert UnknownRun(runId);
        id = ++lastId;
        _contributions[id] =
            Contribution({contributor: msg.sender, status: Status.Pending, amount: 0});
        _runOf[id] = runId;
        emit Submitted(id, runId, msg.sender, repositoryUri, commitHash, descriptionUri);
    }

    /// @inheritdoc ICodeRegistry
    function approve(uint256 id, uint256 amount) external onlyRole(COMMITTEE_ROLE) {
        // a member never decides its own submission: another member or a vote does
        if (_contributions[id].contributor == msg.sender) revert SelfApproval(id, msg.sender);
        uint256 threshold = voteThreshold;
        if (amount > threshold) revert AmountNeedsVote(amount, threshold);
        if (!_budget.tryConsume(_BUDGET, amount)) {
            revert CommitteeBudgetExceeded(amount, _budget.available(_BUDGET));
        }
        _approve(id, amount, false);
    }

    /// @inheritdoc ICodeRegistry
    function approveByVote(uint256 id, uint256 amount) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _approve(id, amount, true);
    }

    /// @inheritdoc ICodeRegistry
    function reject(uint256 id, string calldata reason) external {
        if (!hasRole(COMMITTEE_ROLE, msg.sender)) _checkRole(DEFAULT_ADMIN_ROLE);
        uint256 len = bytes(reason).length;
        if (len == 0 || len > MAX_URI_LENGTH) revert InvalidReason(len);
        Contribution storage c = _pending(id);
        c.status = Status.Rejected;
        emit Rejected(id, _runOf[id], msg.sender, reason);
    }

    /// @inheritdoc ICodeRegistry
    function claim(uint256 id) external returns (uint256 amount) {
        Contribution memory c = _contributions[id];
        if (c.status != Status.Approved) revert NotClaimable(id, c.status);
        amount = c.amount;
        _contributions[id].status = Status.Claimed;
        emit CodeClaimed(id, c.contributor, amount);
        token.mint(c.contributor, amount);
    }

    /// @notice Sets the committee's budget: `capacity` tokens per `period` seconds. Only
    /// governance.
    function setCommitteeBudget(uint208 capacity, uint48 period)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        _budget.sync(_BUDGET);
        _setCommitteeBudget(capacity, period);
    }

    /// @notice Sets the amount above which approvals need a vote. Only governance.
    function setVoteThreshold(uint256 threshold) external onlyRole(DEFAULT_ADMIN_ROLE) {
        voteThreshold = threshold;
        emit VoteThresholdSet(threshold);
    }

    /// @inheritdoc ICodeRegistry
    function codePool(bytes32 runId) public view returns (uint256) {
        (uint256 compute, uint256 code,) = config.poolRewards();
        if (compute == 0) return 0;
        // the compute budget the ledger committed for the run, times code/compute: round
        // numbers (which the committer moves by up to maxRoundSkip a commit) never count
        return Math.mulDiv(ledger.runBudget(runId), code, compute);
    }

    /// @notice Contribution `id`: contributor, status, approved amount and run.
    function contributionOf(uint256 id)
        external
        view
        returns (Contribution memory c, bytes32 runId)
    {
        return (_contributions[id], _runOf[id]);
    }

    /// @notice What the committee may still approve now.
    function committeeBudgetAvailable() external view returns (uint256) {
        return _budget.available(_BUDGET);
    }

    function _approve(uint256 id, uint256 amount, bool byVote) private {
        if (amount == 0 || amount > type(uint88).max) revert InvalidAmount(amount);
        Contribution storage c = _pending(id);
        bytes32 runId = _runOf[id];
        uint256 approved = approvedOf[runId] + amount;
        uint256 pool = codePool(runId);
        if (approved > pool) revert CodePoolExceeded(runId, approved, pool);
        approvedOf[runId] = approved;
        c.status = Status.Approved;
        c.amount = uint88(amount);
        emit Approved(id, runId, amount, byVote);
    }

    /// @dev The contribution `id`, which must exist and be pending.
    function _pending(uint256 id) private view returns (Contribution storage c) {
        c = _contributions[id];
        Status status = c.status;
        if (status == Status.None) revert UnknownContribution(id);
        if (status != Status.Pending) revert AlreadyDecided(id, status);
    }

    function _setCommitteeBudget(uint208 capacity, uint48 period) private {
        if (period == 0) revert InvalidBudget(capacity, period);
        _budget.updateSettings(period, capacity);
        emit CommitteeBudgetSet(capacity, period);
    }
}
