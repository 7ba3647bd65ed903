// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IRunFunding
/// @notice Capital for training runs. Backers deposit ETH into a run while it is open; the ETH
/// pays compute contributors per verified work through cumulative Merkle roots (leaf: OpenZeppelin
/// StandardMerkleTree of (address account, uint256 cumulativeWei)) that the ledger committer
/// publishes once per ledger-committed round and that pay only after a dispute window, during
/// which the guardian or governance may revoke them. Each such root, once final and not revoked,
/// adds the run's share of newly issued ownership (TrainingConfig's capital basis points of
/// `rewardPerRound`) to the run's capital pool (`accrueCapital`), never beyond the run's compute
/// budget on the ContributionLedger times capital/compute and within a governed rate limit;
/// after the run ends backers earn that pool in proportion to deposit x time funded, vesting
/// linearly over `vestingPeriod`. If governance cancels a run, the ETH not yet promised to
/// compute (revoked roots excluded) is refundable pro rata to deposits. Invariant, per run and in
/// total: ETH paid out (compute + refunds) + ETH held == ETH deposited.
/// @dev Trust bounds: one root adds at most min(the run's `ethPerRound`, `maxEthPerRootBps` of
/// its deposits) and pays after `disputeWindow` (>= 1 day on the production profile); capital
/// never accrues for a round without compute budget, before its root is final, or faster than
/// the rate limit; the guardian may pause everything but refunds.
interface IRunFunding {
    /// @notice The run organiser (committer) opened `runId` for deposits until `fundingEnd`.
    /// @param ethPerRound The most ETH (wei) one round may pay compute contributors.
    event RunOpened(bytes32 indexed runId, uint64 fundingEnd, uint128 ethPerRound);
    /// @notice `backer` deposited `amount` wei into `runId`; `totalDeposited` is the run's total.
    event Deposited(
        bytes32 indexed runId, address indexed backer, uint256 amount, uint256 totalDeposited
    );
    /// @notice The committer published an ETH rewards root for (`runId`, `round`).
    /// @param totalWei The cumulative wei the tree pays (all accounts, all rounds so far).
    /// @param capitalPool The run's capital pool (tokens) after this round's accrual.
    /// @param finalizesAt When the root becomes claimable (unless revoked before).
    event EthRootCommitted(
        bytes32 indexed runId,
        uint64 indexed round,
        bytes32 root,
        uint256 totalWei,
        uint256 capitalPool,
        uint64 finalizesAt
    );
    /// @notice The guardian or governance revoked a pending ETH root: it never pays.
    event EthRootRevoked(bytes32 indexed runId, bytes32 indexed root, address by);
    /// @notice `amount` wei were paid to compute contributor `account` (cumulative `cumulativeWei`).
    event EthClaimed(
        bytes32 indexed runId, address indexed account, uint256 amount, uint256 cumulativeWei
    );
    /// @notice `amount` capital-pool tokens vested to `backer` were paid; `claimed` in total.
    event CapitalClaimed(
        bytes32 indexed runId, address indexed backer, uint256 amount, uint256 claimed
    );
    /// @notice Governance cancelled `runId`; `refundPool` wei are refundable pro rata.
    event RunCancelled(bytes32 indexed runId, uint256 refundPool);
    /// @notice `backer` got `amount` wei back from the cancelled run.
    event Refunded(bytes32 indexed runId, address indexed backer, uint256 amount);
    /// @notice Governance set the vesting period of capital ownership (seconds).
    event VestingPeriodSet(uint64 vestingPeriod);
    /// @notice Governance set the dispute window of ETH roots (seconds).
    event DisputeWindowSet(uint64 disputeWindow);
    /// @notice Governance set the most wei one round of `runId` may pay compute.
    event EthPerRoundSet(bytes32 indexed runId, uint128 ethPerRound);
    /// @notice Governance set the most of a run's deposits one ETH root may add (basis points).
    event MaxEthPerRootBpsSet(uint16 bps);
    /// @notice Governance set the capital rate limit: `capacity` tokens per `period` seconds.
    event CapitalLimitSet(uint208 capacity, uint48 period);
    /// @notice The final ETH root `root` of `runId` accrued `amount` capital tokens (minted into
    /// escrow); `capitalPool` is the run's pool after it.
    event CapitalAccrued(
        bytes32 indexed runId, bytes32 indexed root, uint256 amount, uint256 capitalPool
    );

    /// @notice `runId` was already opened.
    error RunAlreadyOpen(bytes32 runId);
    /// @notice `runId` was never opened.
    error UnknownRun(bytes32 runId);
    /// @notice A run's funding must end in the future, within `MAX_FUNDING_DURATION`.
    error InvalidFundingEnd(uint64 fundingEnd, uint64 now_);
    /// @notice A deposit of zero wei (or one that overflows the run's accounting).
    error InvalidDeposit(uint256 amount);
    /// @notice Deposits into `runId` closed at `fundingEnd`; it is now `now_`.
    error RunEnded(bytes32 runId, uint64 fundingEnd, uint64 now_);
    /// @notice `runId` was cancelled at `cancelledAt`: no deposits, no new ETH roots.
    error RunIsCancelled(bytes32 runId, uint64 cancelledAt);
    /// @notice Refunds exist only for cancelled runs; `runId` is live.
    error RunNotCancelled(bytes32 runId);
    /// @notice `round` of `runId` is not committed on the ContributionLedger.
    error RoundNotCommitted(bytes32 runId, uint64 round);
    /// @notice ETH roots of a run must follow strictly increasing rounds (last was `lastRound`).
    error RoundNotIncreasing(bytes32 runId, uint64 round, uint64 lastRound);
    /// @notice A root's cumulative total went down from `previousTotal` to `totalWei`.
    error TotalDecreased(uint256 totalWei, uint256 previousTotal);
    /// @notice The root would pay `roundWei` this round, above `ethPerRound`.
    error EthPerRoundExceeded(uint256 roundWei, uint256 ethPerRound);
    /// @notice The root would pay `totalWei` in total, above the run's deposits `deposited`.
    error EthBudgetExceeded(uint256 totalWei, uint256 deposited);
    /// @notice A zero root, or one already committed for this run.
    error InvalidRoot(bytes32 root);
    /// @notice `root` was never committed for `runId`.
    error UnknownRoot(bytes32 runId, bytes32 root);
    /// @notice `root` is still in its dispute window, claimable at `finalizesAt`.
    error RootPending(bytes32 root, uint64 finalizesAt);
    /// @notice `root` was revoked and never pays.
    error RootRevoked(bytes32 root);
    /// @notice Only pending roots can be revoked; `root` finalized at `finalizesAt`.
    error RootAlreadyFinal(bytes32 root, uint64 finalizesAt);
    /// @notice The proof does not put (`account`, `cumulativeWei`) under the root.
    error InvalidProof(address account, uint256 cumulativeWei);
    /// @notice `account` already claimed `alreadyClaimed` >= `cumulativeWei`.
    error NothingToClaim(address account, uint256 cumulativeWei, uint256 alreadyClaimed);
    /// @notice Paying `amount` would bring the run's compute payments to `paid`, above `committed`.
    error EthOverpaid(uint256 paid, uint256 committed);
    /// @notice Ownership vests only after the run ends at `end`; it is now `now_`.
    error VestingNotStarted(bytes32 runId, uint64 end, uint64 now_);
    /// @notice Nothing more has vested for `backer` (claimed `claimed` of `vested`).
    error NothingVested(address backer, uint256 vested, uint256 claimed);
    /// @notice `backer` has no refund due from `runId` (no deposit, or already refunded).
    error NothingToRefund(bytes32 runId, address backer);
    /// @notice Sending `amount` wei to `to` failed.
    error EthTransferFailed(address to, uint256 amount);
    /// @notice A governed duration outside its bounds.
    error InvalidDuration(bytes32 field, uint64 value);
    /// @notice Basis points outside 1..10,000.
    error InvalidBps(uint16 bps);
    /// @notice `root` of `runId` already accrued its capital share.
    error CapitalAlreadyAccrued(bytes32 runId, bytes32 root);
    /// @notice The run's capital pool `pool` already reaches `cap`, its compute budget on the
    /// ContributionLedger times capital/compute: a round without compute budget adds no capital.
    error NoCapitalToAccrue(bytes32 runId, uint256 pool, uint256 cap);
    /// @notice Minting `amount` capital tokens now exceeds the rate limit (`available` left):
    /// try again later, when the bucket has refilled.
    error CapitalRateExceeded(uint256 amount, uint256 available);
    /// @notice A root of the cancelled `runId` is revocable until `pendingUntil`; its ETH may
    /// yet return to the refund pool, so refunds open then.
    error RefundPending(bytes32 runId, uint64 pendingUntil);

    /// @notice Opens `runId` for deposits until `fundingEnd`, paying compute at most `ethPerRound`
    /// wei a round. Only COMMITTER_ROLE (the run organiser) or governance; once per run.
    function openRun(bytes32 runId, uint64 fundingEnd, uint128 ethPerRound) external;

    /// @notice Deposits `msg.value` into `runId`. Anyone, while the run is open.
    function deposit(bytes32 runId) external payable;

    /// @notice Publishes the cumulative ETH rewards root of `runId` after ledger round `round`,
    /// paying `totalWei` in all: more than the previous root, by at most min(`ethPerRound`,
    /// `maxEthPerRootBps` of the deposits). Only COMMITTER_ROLE, not while paused.
    function commitEthRoot(bytes32 runId, uint64 round, bytes32 root, uint256 totalWei) external;

    /// @notice Mints the round's capital share into escrow for the final, unrevoked `root`, once
    /// per root, within the run's compute budget (times capital/compute) and the rate limit.
    /// Anyone may call, not while paused.
    /// @return amount The tokens added to the run's capital pool.
    function accrueCapital(bytes32 runId, bytes32 root) external returns (uint256 amount);

    /// @notice Revokes a pending root; if it is the run's latest, its ETH is no longer committed
    /// (and joins a cancelled run's refund pool). Only GUARDIAN_ROLE or governance.
    function revokeEthRoot(bytes32 runId, bytes32 root) external;

    /// @notice Pays `account` its `cumulativeWei - claimed` against a finalized, unrevoked `root`.
    /// Anyone may call; the ETH goes to `account`.
    /// @return amount The wei paid now.
    function claimEth(
        bytes32 runId,
        address account,
        uint256 cumulativeWei,
        bytes32 root,
        bytes32[] calldata proof
    ) external returns (uint256 amount);

    /// @notice Pays `backer` what has vested and was not claimed, from the escrow this contract
    /// holds (the capital pool, minted into it as each round accrues). Anyone may call.
    /// @return amount The tokens paid now.
    function claimVested(bytes32 runId, address backer) external returns (uint256 amount);

    /// @notice Cancels `runId`: no more deposits or roots; unspent ETH becomes refundable.
    /// Only governance.
    function cancelRun(bytes32 runId) external;

    /// @notice Refunds `backer`'s pro rata share of the cancelled run's unspent ETH, once no root
    /// of the run can be revoked any more (`RefundPending`). Anyone may call; the ETH goes to
    /// `backer`. Never paused.
    function refund(bytes32 runId, address backer) external returns (uint256 amount);

    /// @notice Capital-pool tokens `backer` is entitled to in total (vested or not).
    function entitlement(bytes32 runId, address backer) external view returns (uint256);

    /// @notice Capital-pool tokens vested for `backer` so far (including claimed).
    function vested(bytes32 runId, address backer) external view returns (uint256);
}
