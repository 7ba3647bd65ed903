// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";
import {IContributionLedger} from "./interfaces/IContributionLedger.sol";
import {IComputeLeases} from "./interfaces/IComputeLeases.sol";

/// @title ComputeLeases
/// @notice ETH leases of compute nodes, paid through the rewards root the ledger commits every
/// round: no transaction per round or per node, no per-block withdrawals (nothing can run
/// overdrawn: a node is paid only what a final root proves it earned, within the escrow).
/// @dev A contract of its own rather than a part of RunFunding: RunFunding's ETH is the backers'
/// pooled per run and paid through its own per-round ETH root (a transaction per funded round),
/// while a lease is one organiser's escrow for one node, paid through the ContributionLedger's
/// root that every round commits anyway. It reuses RunFunding's pattern: cumulative leaves
/// claimed with a proof against a root past its dispute window, caps checked at claim time, the
/// guardian's pause that never moves funds and never stops refunds, and checks-effects-interactions
/// (ETH leaves after every state change, so a re-entering recipient finds nothing more to take).
/// Roles: DEFAULT_ADMIN_ROLE is governance (unpauses, appoints the guardian); GUARDIAN_ROLE
/// pauses.
contract ComputeLeases is IComputeLeases, AccessControl, Pausable {
    /// @notice The role that may pause opening and claiming.
    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    /// @notice The longest window of a lease, in rounds.
    uint64 public constant MAX_LEASE_ROUNDS = 1_000_000;

    /// @notice Where rounds and rewards roots are committed.
    IContributionLedger public immutable ledger;
    /// @notice Leases opened so far (part of each lease id).
    uint256 public leaseCount;

    mapping(bytes32 leaseId => Lease) private _leases;

    /// @param ledger_ The ContributionLedger whose roots carry the lease leaves.
    /// @param admin Governance (the Timelock): DEFAULT_ADMIN_ROLE.
    /// @param guardian May pause (zero: none yet; governance appoints).
    constructor(IContributionLedger ledger_, address admin, address guardian) {
        ledger = ledger_;
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        if (guardian != address(0)) _grantRole(GUARDIAN_ROLE, guardian);
    }

    modifier onlyGuardianOrAdmin() {
        if (!hasRole(GUARDIAN_ROLE, msg.sender)) _checkRole(DEFAULT_ADMIN_ROLE);
        _;
    }

    /// @inheritdoc IComputeLeases
    function openLease(bytes32 runId, address node, uint128 weiPerRound, uint64 rounds)
        external
        payable
        whenNotPaused
        returns (bytes32 leaseId)
    {
        if (node == address(0) || weiPerRound == 0 || rounds == 0 || rounds > MAX_LEASE_ROUNDS) {
            revert InvalidLease(node, weiPerRound, rounds);
        }
        uint256 escrow = uint256(weiPerRound) * rounds; // < 2**148: no overflow
        if (msg.value != escrow) revert WrongEscrow(msg.value, escrow);
        // the round after the last committed (lastRound is 0 before genesis and at genesis alike)
        uint64 start = ledger.lastRound(runId) + 1;
        uint64 end = start + rounds - 1;
        uint256 count = leaseCount;
        leaseId = keccak256(
            abi.encode(
                block.chainid, address(this), count, msg.sender, runId, node, weiPerRound, rounds
            )
        );
        leaseCount = count + 1;
        Lease storage l = _leases[leaseId];
        l.organiser = msg.sender;
        l.startRound = start;
        l.node = node;
        l.endRound = end;
        l.weiPerRound = weiPerRound;
        l.runId = runId;
        emit LeaseOpened(leaseId, runId, node, msg.sender, weiPerRound, start, end, escrow);
    }

    /// @inheritdoc IComputeLeases
    function claim(
        bytes32 leaseId,
        uint256 cumulativeWei,
        uint64 throughRound,
        bytes32 root,
        bytes32[] calldata proof
    ) external whenNotPaused returns (uint256 amount) {
        Lease storage l = _proven(leaseId, cumulativeWei, throughRound, root, proof);
        uint256 paid = l.paid;
        if (cumulativeWei <= paid) revert NothingToClaim(leaseId, cumulativeWei, paid);
        // cumulativeWei > paid: no underflow; <= the cap, so <= the escrow (a uint128)
        unchecked {
            amount = cumulativeWei - paid;
        }
        // forge-lint: disable-next-line(unsafe-typecast)
        l.paid = uint128(cumulativeWei);
        address node = l.node;
        emit LeaseClaimed(leaseId, node, amount, cumulativeWei);
        _send(node, amount);
    }

    /// @inheritdoc IComputeLeases
    function refund(
        bytes32 leaseId,
        uint256 cumulativeWei,
        uint64 throughRound,
        bytes32 root,
        bytes32[] calldata proof
    ) external returns (uint256 refunded) {
        Lease storage l = _proven(leaseId, cumulativeWei, throughRound, root, proof);
        if (l.settled) revert LeaseSettled(leaseId);
        uint64 end = l.endRound;
        if (throughRound < end) {
            // early: only the organiser, and only with the run's last committed round
            if (msg.sender != l.organiser) revert LeaseNotEnded(leaseId, end, throughRound);
            uint64 last = ledger.lastRound(l.runId);
            if (throughRound != last) revert RunNotStopped(l.runId, last, throughRound);
        }
        uint256 earned = Math.max(cumulativeWei, l.paid);
        // earned <= the cap <= the escrow: no underflow, fits a uint128
        refunded = uint256(l.weiPerRound) * (end - l.startRound + 1) - earned;
        l.settled = true;
        // forge-lint: disable-next-line(unsafe-typecast)
        l.refunded = uint128(refunded);
        address organiser = l.organiser;
        emit LeaseRefunded(leaseId, organiser, refunded, earned);
        if (refunded != 0) _send(organiser, refunded);
    }

    /// @notice Stops opening and claiming (never refunds). The guardian or governance.
    function pause() external onlyGuardianOrAdmin {
        _pause();
    }

    /// @notice Resumes what `pause` stopped. Only governance.
    function unpause() external onlyRole(DEFAULT_ADMIN_ROLE) {
        _unpause();
    }

    // ------------------------------------------------------------------ views

    /// @inheritdoc IComputeLeases
    function leaseOf(bytes32 leaseId) external view returns (Lease memory) {
        return _leases[leaseId];
    }

    /// @inheritdoc IComputeLeases
    function capOf(bytes32 leaseId, uint64 throughRound) public view returns (uint256) {
        Lease storage l = _leases[leaseId];
        uint64 start = l.startRound;
        if (throughRound < start) return 0;
        uint64 end = l.endRound;
        uint256 rounds = (throughRound < end ? throughRound : end) - start + 1;
        uint256 escrow = uint256(l.weiPerRound) * (end - start + 1);
        // after a settlement the node keeps only what it earned: escrow - refunded
        return Math.min(uint256(l.weiPerRound) * rounds, escrow - l.refunded);
    }

    /// @inheritdoc IComputeLeases
    function leaseLeaf(bytes32 leaseId, uint256 cumulativeWei, uint64 throughRound)
        public
        view
        returns (bytes32)
    {
        // OpenZeppelin StandardMerkleTree leaf: double hash of the ABI encoding (four words).
        return keccak256(
            bytes.concat(keccak256(abi.encode(address(this), leaseId, cumulativeWei, throughRound)))
        );
    }

    // ------------------------------------------------------------------ internals

    /// @dev The lease, once the leaf is proven under a claimable root, its round committed and
    /// its amount within the lease's cap (after a settlement: what the node earned).
    function _proven(
        bytes32 leaseId,
        uint256 cumulativeWei,
        uint64 throughRound,
        bytes32 root,
        bytes32[] calldata proof
    ) private view returns (Lease storage l) {
        l = _leases[leaseId];
        if (l.organiser == address(0)) revert UnknownLease(leaseId);
        ledger.claimable(root); // reverts unless committed, final and not revoked
        bytes32 leaf = leaseLeaf(leaseId, cumulativeWei, throughRound);
        if (!MerkleProof.verifyCalldata(proof, root, leaf)) {
            revert InvalidProof(leaseId, cumulativeWei, throughRound);
        }
        bytes32 runId = l.runId;
        // lastRound is 0 before a run's genesis, and a lease's rounds start at 1: a leaf through
        // round 0 pays nothing (its cap is 0) and can never end a lease
        if (throughRound > ledger.lastRound(runId)) revert RoundNotCommitted(runId, throughRound);
        uint256 cap = capOf(leaseId, throughRound);
        if (cumulativeWei > cap) revert LeaseOverpaid(leaseId, cumulativeWei, cap);
    }

    function _send(address to, uint256 amount) private {
        (bool ok,) = to.call{value: amount}("");
        if (!ok) revert EthTransferFailed(to, amount);
    }
}
