// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

/// @title IComputeLeases
/// @notice Compute leases paid inside the round's settlement. An organiser escrows ETH for a node
/// at a price per round for a window of the run's rounds (escrow = `weiPerRound` x `rounds`).
/// The ledger pays nothing per round here: each lease is a leaf of the cumulative rewards tree
/// the ledger already commits every round on the ContributionLedger (`commitRound`), leaf
/// `keccak256(keccak256(abi.encode(address(this), leaseId, cumulativeWei, throughRound)))` (four
/// words, so it can never be taken for a two-word `(account, amount)` rewards leaf, and bound to
/// this contract). `cumulativeWei` is what the node earned in the lease's window up to and
/// including ledger round `throughRound`: `weiPerRound` per round it completed. The node claims
/// against any claimable root (final, not revoked); after the window's last round is committed,
/// one `refund` transaction settles the lease: the organiser gets the escrow the node did not
/// earn, the node may still claim the rest. Invariant, per lease and in total: paid + refunded +
/// held == escrowed.
/// @dev Trust bounds: the ledger committer (who writes the leaves) can pay a lease at most
/// `weiPerRound` x (rounds of the window committed on the ContributionLedger up to the leaf's
/// `throughRound`), never more than its escrow, and never against a pending or revoked root; it
/// cannot move one lease's escrow to another (each lease is capped by its own terms). The
/// guardian may pause opening and claiming (never refunds, never moves ETH); only governance
/// unpauses. Nothing else has any role here.
interface IComputeLeases {
    /// @notice A lease's terms and accounting.
    /// @param organiser Who escrowed the ETH and receives the refund.
    /// @param startRound The first ledger round of the run the lease pays for.
    /// @param node The leased node's key (the ledger counts its completed rounds); paid to it.
    /// @param endRound The last ledger round of the window (inclusive).
    /// @param settled Whether `refund` ran (the unused escrow went back).
    /// @param weiPerRound The price of one completed round, in wei.
    /// @param paid Wei paid to the node so far.
    /// @param refunded Wei returned to the organiser (0 until settled).
    /// @param runId The run whose rounds count.
    struct Lease {
        address organiser;
        uint64 startRound;
        address node;
        uint64 endRound;
        bool settled;
        uint128 weiPerRound;
        uint128 paid;
        uint128 refunded;
        bytes32 runId;
    }

    /// @notice `organiser` escrowed `escrow` wei for `node` in `runId`, paying `weiPerRound` for
    /// each round it completes among rounds `startRound`..`endRound`.
    event LeaseOpened(
        bytes32 indexed leaseId,
        bytes32 indexed runId,
        address indexed node,
        address organiser,
        uint128 weiPerRound,
        uint64 startRound,
        uint64 endRound,
        uint256 escrow
    );
    /// @notice The node of `leaseId` was paid `amount` wei (`cumulativeWei` in all).
    event LeaseClaimed(
        bytes32 indexed leaseId, address indexed node, uint256 amount, uint256 cumulativeWei
    );
    /// @notice `leaseId` ended: `refunded` wei went back to its organiser, the node earned
    /// `earned` wei in all (what it has not claimed yet stays claimable).
    event LeaseRefunded(
        bytes32 indexed leaseId, address indexed organiser, uint256 refunded, uint256 earned
    );

    /// @notice A node of address zero, a price of zero, or a window of 0 or more than
    /// `MAX_LEASE_ROUNDS` rounds.
    error InvalidLease(address node, uint128 weiPerRound, uint64 rounds);
    /// @notice The escrow sent (`sent`) is not `weiPerRound` x `rounds` (`expected`).
    error WrongEscrow(uint256 sent, uint256 expected);
    /// @notice `leaseId` was never opened.
    error UnknownLease(bytes32 leaseId);
    /// @notice `leaseId` was already settled by `refund` (the node may still claim what it earned).
    error LeaseSettled(bytes32 leaseId);
    /// @notice The proof does not put (`leaseId`, `cumulativeWei`, `throughRound`) under the root.
    error InvalidProof(bytes32 leaseId, uint256 cumulativeWei, uint64 throughRound);
    /// @notice `throughRound` of `runId` is not committed on the ContributionLedger yet.
    error RoundNotCommitted(bytes32 runId, uint64 throughRound);
    /// @notice The leaf would pay `cumulativeWei`, above the lease's cap `cap` (its price times
    /// the window's rounds committed through the leaf's round, and never above the escrow).
    error LeaseOverpaid(bytes32 leaseId, uint256 cumulativeWei, uint256 cap);
    /// @notice The node was already paid `paid` >= `cumulativeWei`.
    error NothingToClaim(bytes32 leaseId, uint256 cumulativeWei, uint256 paid);
    /// @notice The lease runs through round `endRound`; the leaf only counts through
    /// `throughRound`: refund with a root committed after the last round of the window.
    error LeaseNotEnded(bytes32 leaseId, uint64 endRound, uint64 throughRound);
    /// @notice An early refund counts every committed round: the leaf is through `throughRound`,
    /// the run's last committed round is `lastRound` (refund with that round's root once final).
    error RunNotStopped(bytes32 runId, uint64 lastRound, uint64 throughRound);
    /// @notice Sending `amount` wei to `to` failed.
    error EthTransferFailed(address to, uint256 amount);

    /// @notice Opens a lease of `node` in `runId` for the next `rounds` ledger rounds (from the
    /// one after the run's last committed round, or round 1 before its genesis) at `weiPerRound`
    /// per completed round; `msg.value` must be `weiPerRound` x `rounds`. Anyone (the organiser),
    /// not while paused.
    /// @return leaseId keccak256 of (chain id, this contract, the lease count, the organiser,
    /// `runId`, `node`, `weiPerRound`, `rounds`).
    function openLease(bytes32 runId, address node, uint128 weiPerRound, uint64 rounds)
        external
        payable
        returns (bytes32 leaseId);

    /// @notice Pays the node of `leaseId` its `cumulativeWei` minus what it was paid, proven by a
    /// leaf of `root` (a claimable ContributionLedger rewards root). Anyone may call; the ETH goes
    /// to the node. Not while paused.
    /// @return amount The wei paid now.
    function claim(
        bytes32 leaseId,
        uint256 cumulativeWei,
        uint64 throughRound,
        bytes32 root,
        bytes32[] calldata proof
    ) external returns (uint256 amount);

    /// @notice Settles `leaseId` in one transaction once a claimable root holds its leaf through
    /// the window's last round: the organiser gets the escrow minus max(`cumulativeWei`, paid);
    /// the node keeps what it earned (claimable). Anyone may call; never paused.
    /// A run that stops early: its organiser may settle before the window's end with the leaf
    /// through the run's last committed round (`throughRound` == the ledger's `lastRound`, its
    /// root final), so every committed round counts; the node's later rounds are not paid.
    /// @return refunded The wei sent back to the organiser.
    function refund(
        bytes32 leaseId,
        uint256 cumulativeWei,
        uint64 throughRound,
        bytes32 root,
        bytes32[] calldata proof
    ) external returns (uint256 refunded);

    /// @notice The lease `leaseId` (organiser zero: unknown).
    function leaseOf(bytes32 leaseId) external view returns (Lease memory);

    /// @notice The most `leaseId` may have paid by ledger round `throughRound`: its price times
    /// the window's rounds through `throughRound`, less what a settlement refunded.
    function capOf(bytes32 leaseId, uint64 throughRound) external view returns (uint256);

    /// @notice The leaf hash of (`leaseId`, `cumulativeWei`, `throughRound`) in a rewards tree.
    function leaseLeaf(bytes32 leaseId, uint256 cumulativeWei, uint64 throughRound)
        external
        view
        returns (bytes32);
}
