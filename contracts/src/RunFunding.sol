// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {RateLimiter} from "@openzeppelin/contracts/utils/RateLimiter.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {IVotes} from "@openzeppelin/contracts/governance/utils/IVotes.sol";
import {IModelShareToken} from "./interfaces/IModelShareToken.sol";
import {IOwnershipSplit} from "./interfaces/IOwnershipSplit.sol";
import {IRunFunding} from "./interfaces/IRunFunding.sol";

/// @title RunFunding
/// @notice Capital for training runs: ETH deposits that pay verified compute, and the capital
/// pool's ownership for the backers. One funding account per run, all in this contract.
/// @dev The capital pool is minted into this contract as it accrues (MINTER_ROLE), held in
/// escrow, and paid out by transfer as it vests. It accrues by `accrueCapital` (anyone), one
/// round's capital share of `rewardPerRound` per ETH root once that root is final and not
/// revoked, never past the run's compute budget on the ContributionLedger times capital/compute
/// (so a round that paid no compute adds no capital), and within a governed rate limit (an
/// OpenZeppelin RateLimiter bucket, like the token's grants). The escrow delegates to nobody, so
/// unvested ownership does not vote, and a vested claim writes only the backer's vote checkpoint.
/// @dev Roles: DEFAULT_ADMIN_ROLE is governance (the Timelock): cancels runs, sets the vesting
/// period, the dispute window, the capital rate limit, the cap on ETH per root (basis points of
/// the run's deposits) and a run's ETH per round, appoints the guardian, unpauses.
/// COMMITTER_ROLE (the ledger operator) opens runs and commits ETH roots within those bounds.
/// GUARDIAN_ROLE revokes a pending root and pauses deposits, roots, accruals and claims: it never
/// moves funds (refunds of a cancelled run are never paused). ETH leaves only after every state
/// change (checks-effects-interactions), so a re-entering recipient finds nothing more to take.
///
/// Capital weight: a deposit `a` at time `t` weighs `a * (end - t)`, `end` the run's funding end
/// (or its cancellation, if earlier). Kept as two sums per backer and per run (deposits `D` and
/// `S = sum(a * t)`), so a backer's weight is `D_b * end - S_b` in O(1) whatever its deposits.
contract RunFunding is IRunFunding, AccessControl, Pausable {
    using SafeCast for uint256;
    using SafeERC20 for IERC20;
    using RateLimiter for RateLimiter.RefillingBucket;

    /// @notice The role that opens runs and commits ETH roots (the ledger operator).
    bytes32 public constant COMMITTER_ROLE = keccak256("COMMITTER_ROLE");
    /// @notice The role that may revoke a pending ETH root.
    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    /// @notice A run's deposits close at most this long after it opens.
    uint64 public constant MAX_FUNDING_DURATION = 365 days;
    /// @notice Upper bound on the vesting period.
    uint64 public constant MAX_VESTING_PERIOD = 4 * 365 days;
    /// @notice Upper bound on the dispute window of ETH roots.
    uint64 public constant MAX_DISPUTE_WINDOW = 30 days;
    /// @notice Basis points: 10,000 = all of a run's deposits.
    uint16 public constant BPS = 10_000;
    /// @dev The capital mints' one shared bucket.
    bytes32 private constant _CAPITAL = bytes32(0);

    /// @dev One run's accounting, in six packed slots. `ethCommitted` is the total of the last
    /// committed root not revoked (never above `totalDeposited`); `ethPaid` what compute claims
    /// paid; `pendingUntil` when the run's last committed root stops being revocable.
    struct Run {
        uint64 fundingEnd; // slot 0
        uint64 cancelledAt;
        uint64 lastRound;
        bool hasRound;
        uint128 totalDeposited; // slot 1
        uint128 weightedTime; // sum(amount * depositTime)
        uint128 ethCommitted; // slot 2
        uint128 ethPaid;
        uint128 capitalPool; // slot 3
        uint128 ethPerRound;
        uint128 refundPool; // slot 4
        uint128 refunded;
        uint64 pendingUntil; // slot 5
    }

    /// @dev A backer's deposits in one run: their sum and sum(amount * depositTime).
    struct Backer {
        uint128 deposited;
        uint128 weightedTime;
    }

    /// @dev A committed ETH root: claimable from `finalizesAt` unless revoked; `accrued` once its
    /// capital share was minted; `previousTotal` and `total` the run's committed ETH before and
    /// after it (revoking the run's latest root brings `ethCommitted` back to `previousTotal`).
    struct Root {
        uint64 finalizesAt;
        bool revoked;
        bool accrued;
        uint128 previousTotal;
        uint128 total;
    }

    /// @notice Constructor parameters.
    /// @param admin Governance (the Timelock): DEFAULT_ADMIN_ROLE.
    /// @param committer The ledger operator: COMMITTER_ROLE.
    /// @param guardian May revoke pending roots and pause (zero: none yet; governance appoints).
    /// @param maxEthPerRootBps Most of a run's deposits one root may add, in basis points.
    /// @param capitalLimit Most capital tokens minted per `capitalPeriod` seconds, all runs.
    struct Init {
        IERC20 token;
        IContributionLedger ledger;
        IOwnershipSplit config;
        address admin;
        address committer;
        address guardian;
        uint64 vestingPeriod;
        uint64 disputeWindow;
        uint16 maxEthPerRootBps;
        uint208 capitalLimit;
        uint48 capitalPeriod;
    }

    /// @notice The ownership token this contract holds in escrow and pays vested capital in.
    IERC20 public immutable token;
    /// @notice Where rounds are committed: an ETH root needs its round committed there.
    IContributionLedger public immutable ledger;
    /// @notice The governed ownership split (capital basis points of the reward per round).
    IOwnershipSplit public immutable config;

    // Declared first so they share Pausable's slot: a commit reads the pause flag, the window
    // and the cap on ETH per root with one SLOAD.
    /// @notice How long capital ownership vests after a run's funding ends (seconds).
    uint64 public vestingPeriod;
    /// @notice How long an ETH root stays revocable before it pays (seconds).
    uint64 public disputeWindow;
    /// @notice Most of a run's deposits one ETH root may add (basis points; governance's).
    uint16 public maxEthPerRootBps;

    mapping(bytes32 runId => Run) private _runs;
    mapping(bytes32 runId => mapping(address backer => Backer)) private _backers;
    mapping(bytes32 runId => mapping(bytes32 root => Root)) private _roots;
    /// @notice Cumulative wei paid to a compute contributor in a run.
    mapping(bytes32 runId => mapping(address account => uint256)) public ethClaimed;
    /// @notice Capital-pool tokens paid to a backer of a run.
    mapping(bytes32 runId => mapping(address backer => uint256)) public capitalClaimed;
    /// @notice Whether a backer of a cancelled run took its refund.
    mapping(bytes32 runId => mapping(address backer => bool)) public refunded;
    RateLimiter.RefillingBucket private _capitalBucket;

    constructor(Init memory init) {
        token = init.token;
        ledger = init.ledger;
        config = init.config;
        IVotes(address(init.token)).delegate(address(0)); // escrowed tokens carry no votes
        _grantRole(DEFAULT_ADMIN_ROLE, init.admin);
        _grantRole(COMMITTER_ROLE, init.committer);
        if (init.guardian != address(0)) _grantRole(GUARDIAN_ROLE, init.guardian);
        _setVestingPeriod(init.vestingPeriod);
        _setDisputeWindow(init.disputeWindow);
        _setMaxEthPerRootBps(init.maxEthPerRootBps);
        _setCapitalLimit(init.capitalLimit, init.capitalPeriod);
    }

    modifier onlyGuardianOrAdmin() {
        if (!hasRole(GUARDIAN_ROLE, msg.sender)) _checkRole(DEFAULT_ADMIN_ROLE);
        _;
    }

    // ------------------------------------------------------------------ runs and deposits

    /// @inheritdoc IRunFunding
    function openRun(bytes32 runId, uint64 fundingEnd, uint128 ethPerRound) external {
        if (!hasRole(COMMITTER_ROLE, msg.sender)) _checkRole(DEFAULT_ADMIN_ROLE);
        Run storage run = _runs[runId];
        if (run.fundingEnd != 0) revert RunAlreadyOpen(runId);
        uint64 now_ = uint64(block.timestamp);
        if (fundingEnd <= now_ || fundingEnd - now_ > MAX_FUNDING_DURATION) {
            revert InvalidFundingEnd(fundingEnd, now_);
        }
        run.fundingEnd = fundingEnd;
        run.ethPerRound = ethPerRound;
        emit RunOpened(runId, fundingEnd, ethPerRound);
    }

    /// @inheritdoc IRunFunding
    function deposit(bytes32 runId) external payable whenNotPaused {
        Run storage run = _runs[runId];
        uint64 fundingEnd = run.fundingEnd;
        if (fundingEnd == 0) revert UnknownRun(runId);
        if (run.cancelledAt != 0) revert RunIsCancelled(runId, run.cancelledAt);
        if (block.timestamp >= fundingEnd) {
            revert RunEnded(runId, fundingEnd, uint64(block.timestamp));
        }
        if (msg.value == 0 || msg.value > type(uint96).max) revert InvalidDeposit(msg.value);
        // msg.value < 2**96 and block.timestamp < 2**64: the product fits 160 bits, and the sums
        // of uint128 fields overflow only past 2**128 wei of deposits (checked by SafeCast).
        uint256 weighted = msg.value * block.timestamp;
        uint256 total = run.totalDeposited + msg.value;
        run.totalDeposited = total.toUint128();
        run.weightedTime = (run.weightedTime + weighted).toUint128();
        Backer storage b = _backers[runId][msg.sender];
        b.deposited = (b.deposited + msg.value).toUint128();
        b.weightedTime = (b.weightedTime + weighted).toUint128();
        emit Deposited(runId, msg.sender, msg.value, total);
    }

    // ------------------------------------------------------------------ ETH for compute

    /// @inheritdoc IRunFunding
    function commitEthRoot(bytes32 runId, uint64 round, bytes32 root, uint256 totalWei)
        external
        onlyRole(COMMITTER_ROLE)
        whenNotPaused
    {
        Run storage run = _runs[runId];
        if (run.fundingEnd == 0) revert UnknownRun(runId);
        if (run.cancelledAt != 0) revert RunIsCancelled(runId, run.cancelledAt);
        if (run.hasRound && round <= run.lastRound) {
            revert RoundNotIncreasing(runId, round, run.lastRound);
        }
        if (ledger.checkpointOf(runId, round) == bytes32(0)) {
            revert RoundNotCommitted(runId, round);
        }
        Root storage r = _roots[runId][root];
        if (root == bytes32(0) || r.finalizesAt != 0) revert InvalidRoot(root);
        uint128 previous = run.ethCommitted;
        if (totalWei <= previous) revert TotalDecreased(totalWei, previous);
        uint256 deposited = run.totalDeposited;
        // the committer's ethPerRound, never above governance's share of the deposits
        uint256 limit = Math.min(run.ethPerRound, deposited * maxEthPerRootBps / BPS);
        if (totalWei - previous > limit) revert EthPerRoundExceeded(totalWei - previous, limit);
        if (totalWei > deposited) revert EthBudgetExceeded(totalWei, deposited);
        run.lastRound = round;
        run.hasRound = true;
        run.ethCommitted = uint128(totalWei); // <= totalDeposited, a uint128
        uint64 finalizesAt = uint64(block.timestamp) + disputeWindow;
        if (finalizesAt > run.pendingUntil) run.pendingUntil = finalizesAt;
        r.finalizesAt = finalizesAt;
        r.previousTotal = previous;
        r.total = uint128(totalWei);
        emit EthRootCommitted(runId, round, root, totalWei, run.capitalPool, finalizesAt);
    }

    /// @inheritdoc IRunFunding
    function accrueCapital(bytes32 runId, bytes32 root)
        external
        whenNotPaused
        returns (uint256 amount)
    {
        Root storage r = _roots[runId][root];
        uint64 finalizesAt = r.finalizesAt;
        if (finalizesAt == 0) revert UnknownRoot(runId, root);
        if (r.revoked) revert RootRevoked(root);
        if (block.timestamp < finalizesAt) revert RootPending(root, finalizesAt);
        if (r.accrued) revert CapitalAlreadyAccrued(runId, root);
        Run storage run = _runs[runId];
        uint256 pool = run.capitalPool;
        (uint256 computeReward,, uint256 capitalReward) = config.poolRewards();
        // capital in proportion to the compute budget the ledger committed for this run
        uint256 cap = computeReward == 0
            ? 0
            : Math.mulDiv(ledger.runBudget(runId), capitalReward, computeReward);
        amount = cap > pool ? Math.min(capitalReward, cap - pool) : 0;
        if (amount == 0) revert NoCapitalToAccrue(runId, pool, cap);
        if (!_capitalBucket.tryConsume(_CAPITAL, amount)) {
            revert CapitalRateExceeded(amount, _capitalBucket.available(_CAPITAL));
        }
        r.accrued = true;
        pool += amount;
        run.capitalPool = pool.toUint128();
        emit CapitalAccrued(runId, root, amount, pool);
        IModelShareToken(address(token)).mint(address(this), amount);
    }

    /// @inheritdoc IRunFunding
    function revokeEthRoot(bytes32 runId, bytes32 root) external onlyGuardianOrAdmin {
        Root storage r = _roots[runId][root];
        uint64 finalizesAt = r.finalizesAt;
        if (finalizesAt == 0) revert UnknownRoot(runId, root);
        if (r.revoked) revert RootRevoked(root);
        if (block.timestamp >= finalizesAt) revert RootAlreadyFinal(root, finalizesAt);
        r.revoked = true;
        Run storage run = _runs[runId];
        uint128 total = r.total;
        if (total == run.ethCommitted) {
            // the run's latest root: what it added is no longer committed (F5), except what
            // older final roots already paid (a tree may promise more than its own total)
            uint128 previous = r.previousTotal;
            uint128 paid = run.ethPaid;
            uint128 kept = previous > paid ? previous : paid;
            run.ethCommitted = kept;
            if (run.cancelledAt != 0) run.refundPool += total - kept;
        }
        emit EthRootRevoked(runId, root, msg.sender);
    }

    /// @inheritdoc IRunFunding
    function claimEth(
        bytes32 runId,
        address account,
        uint256 cumulativeWei,
        bytes32 root,
        bytes32[] calldata proof
    ) external whenNotPaused returns (uint256 amount) {
        Root storage r = _roots[runId][root];
        uint64 finalizesAt = r.finalizesAt;
        if (finalizesAt == 0) revert UnknownRoot(runId, root);
        if (r.revoked) revert RootRevoked(root);
        if (block.timestamp < finalizesAt) revert RootPending(root, finalizesAt);
        // OpenZeppelin StandardMerkleTree leaf: double hash of the ABI encoding.
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(account, cumulativeWei))));
        if (!MerkleProof.verifyCalldata(proof, root, leaf)) {
            revert InvalidProof(account, cumulativeWei);
        }
        uint256 already = ethClaimed[runId][account];
        if (cumulativeWei <= already) revert NothingToClaim(account, cumulativeWei, already);
        // cumulativeWei > already: no underflow.
        unchecked {
            amount = cumulativeWei - already;
        }
        Run storage run = _runs[runId];
        uint256 paid = run.ethPaid + amount;
        if (paid > run.ethCommitted) revert EthOverpaid(paid, run.ethCommitted);
        ethClaimed[runId][account] = cumulativeWei;
        run.ethPaid = uint128(paid); // <= ethCommitted, a uint128
        emit EthClaimed(runId, account, amount, cumulativeWei);
        _send(account, amount);
    }

    // ------------------------------------------------------------------ capital ownership

    /// @inheritdoc IRunFunding
    function claimVested(bytes32 runId, address backer)
        external
        whenNotPaused
        returns (uint256 amount)
    {
        uint256 vested_ = _vested(runId, backer, true);
        uint256 claimed = capitalClaimed[runId][backer];
        if (vested_ <= claimed) revert NothingVested(backer, vested_, claimed);
        // vested_ > claimed: no underflow.
        unchecked {
            amount = vested_ - claimed;
        }
        capitalClaimed[runId][backer] = vested_;
        emit CapitalClaimed(runId, backer, amount, vested_);
        token.safeTransfer(backer, amount);
    }

    /// @inheritdoc IRunFunding
    function entitlement(bytes32 runId, address backer) public view returns (uint256) {
        Run storage run = _runs[runId];
        uint256 end = _end(run);
        Backer memory b = _backers[runId][backer];
        // every deposit happened before `end`: end * deposited >= weightedTime
        uint256 weight = uint256(b.deposited) * end - b.weightedTime;
        if (weight == 0) return 0;
        uint256 total = uint256(run.totalDeposited) * end - run.weightedTime;
        return Math.mulDiv(run.capitalPool, weight, total);
    }

    /// @inheritdoc IRunFunding
    function vested(bytes32 runId, address backer) external view returns (uint256) {
        return _vested(runId, backer, false);
    }

    // ------------------------------------------------------------------ cancellation

    /// @inheritdoc IRunFunding
    function cancelRun(bytes32 runId) external onlyRole(DEFAULT_ADMIN_ROLE) {
        Run storage run = _runs[runId];
        if (run.fundingEnd == 0) revert UnknownRun(runId);
        if (run.cancelledAt != 0) revert RunIsCancelled(runId, run.cancelledAt);
        run.cancelledAt = uint64(block.timestamp);
        // ETH promised to compute (committed roots) stays claimable; the rest goes back.
        uint128 pool = run.totalDeposited - run.ethCommitted;
        run.refundPool = pool;
        emit RunCancelled(runId, pool);
    }

    /// @inheritdoc IRunFunding
    function refund(bytes32 runId, address backer) external returns (uint256 amount) {
        Run storage run = _runs[runId];
        if (run.cancelledAt == 0) revert RunNotCancelled(runId);
        // a root still revocable may yet return its ETH to the pool: refunds wait for it
        if (block.timestamp < run.pendingUntil) revert RefundPending(runId, run.pendingUntil);
        uint256 deposited = _backers[runId][backer].deposited;
        if (deposited == 0 || refunded[runId][backer]) revert NothingToRefund(runId, backer);
        // rounds down: the sum of refunds never exceeds refundPool
        amount = Math.mulDiv(run.refundPool, deposited, run.totalDeposited);
        refunded[runId][backer] = true;
        run.refunded += uint128(amount); // <= refundPool, a uint128
        emit Refunded(runId, backer, amount);
        _send(backer, amount);
    }

    // ------------------------------------------------------------------ governance

    /// @notice Sets the vesting period of capital ownership. Only governance.
    function setVestingPeriod(uint64 vestingPeriod_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setVestingPeriod(vestingPeriod_);
    }

    /// @notice Sets the dispute window of ETH roots. Only governance.
    function setDisputeWindow(uint64 disputeWindow_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setDisputeWindow(disputeWindow_);
    }

    /// @notice Sets the most of a run's deposits one ETH root may add (basis points, 1..10,000).
    /// Only governance.
    function setMaxEthPerRootBps(uint16 bps) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setMaxEthPerRootBps(bps);
    }

    /// @notice Sets the capital rate limit: at most `capacity` tokens minted per `period`
    /// seconds, all runs together (0 stops capital accrual). Only governance.
    function setCapitalLimit(uint208 capacity, uint48 period)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        _capitalBucket.sync(_CAPITAL);
        _setCapitalLimit(capacity, period);
    }

    /// @notice Stops deposits, ETH roots, capital accrual and claims (never refunds). The
    /// guardian or governance.
    function pause() external onlyGuardianOrAdmin {
        _pause();
    }

    /// @notice Resumes what `pause` stopped. Only governance.
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    /// @notice Capital tokens that may be minted now within the rate limit.
    function capitalAvailable() external view returns (uint256) {
        return _capitalBucket.available(_CAPITAL);
    }

    /// @notice Sets the most wei one round of `runId` may pay compute. Only governance.
    function setEthPerRound(bytes32 runId, uint128 ethPerRound)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        Run storage run = _runs[runId];
        if (run.fundingEnd == 0) revert UnknownRun(runId);
        run.ethPerRound = ethPerRound;
        emit EthPerRoundSet(runId, ethPerRound);
    }

    // ------------------------------------------------------------------ views

    /// @notice One run's accounting.
    function runOf(bytes32 runId) external view returns (Run memory) {
        return _runs[runId];
    }

    /// @notice One backer's deposits in a run (sum, and sum of amount x deposit time).
    function backerOf(bytes32 runId, address backer) external view returns (Backer memory) {
        return _backers[runId][backer];
    }

    /// @notice When `root` of `runId` pays (0: unknown) and whether it was revoked.
    function rootOf(bytes32 runId, bytes32 root) external view returns (Root memory) {
        return _roots[runId][root];
    }

    // ------------------------------------------------------------------ internals

    /// @dev When deposits stop counting: the funding end, or the cancellation if earlier.
    function _end(Run storage run) private view returns (uint256) {
        uint64 cancelledAt = run.cancelledAt;
        uint64 fundingEnd = run.fundingEnd;
        return cancelledAt != 0 && cancelledAt < fundingEnd ? cancelledAt : fundingEnd;
    }

    /// @dev Entitlement times the vested fraction; reverts before vesting starts if `strict`.
    function _vested(bytes32 runId, address backer, bool strict) private view returns (uint256) {
        Run storage run = _runs[runId];
        if (run.fundingEnd == 0) {
            if (strict) revert UnknownRun(runId);
            return 0;
        }
        uint256 end = _end(run);
        if (block.timestamp < end) {
            if (strict) revert VestingNotStarted(runId, uint64(end), uint64(block.timestamp));
            return 0;
        }
        uint256 full = entitlement(runId, backer);
        uint256 elapsed = block.timestamp - end;
        uint256 period = vestingPeriod;
        return elapsed >= period ? full : Math.mulDiv(full, elapsed, period);
    }

    function _send(address to, uint256 amount) private {
        (bool ok,) = to.call{value: amount}("");
        if (!ok) revert EthTransferFailed(to, amount);
    }

    function _setVestingPeriod(uint64 v) private {
        if (v == 0 || v > MAX_VESTING_PERIOD) revert InvalidDuration("vestingPeriod", v);
        vestingPeriod = v;
        emit VestingPeriodSet(v);
    }

    function _setDisputeWindow(uint64 w) private {
        if (w == 0 || w > MAX_DISPUTE_WINDOW) revert InvalidDuration("disputeWindow", w);
        disputeWindow = w;
        emit DisputeWindowSet(w);
    }

    function _setMaxEthPerRootBps(uint16 bps) private {
        if (bps == 0 || bps > BPS) revert InvalidBps(bps);
        maxEthPerRootBps = bps;
        emit MaxEthPerRootBpsSet(bps);
    }

    function _setCapitalLimit(uint208 capacity, uint48 period) private {
        if (period == 0) revert InvalidDuration("capitalPeriod", period);
        _capitalBucket.updateSettings(period, capacity);
        emit CapitalLimitSet(capacity, period);
    }
}
